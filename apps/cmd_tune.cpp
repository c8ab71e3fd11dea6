// swapffn tune: grid search of the fused backend's kernel choices on the present GPU.
// 1) times each FFN GEMM tile alone, beside cuBLAS on the same shape (informative);
// 2) times the whole token step for every (tile, event head, row groups) per batch size, with the SM
//    clock over each, because the choices interact (L2 traffic, wave quantisation, overlap);
// 3) writes the winners per batch to a cache the engine reads (`--tune`, or SWAPFFN_TUNE_FILE).
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/weights.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "bench/bench_runner.hpp"
#include "bench/ffn_gemm_timing.hpp"
#include "bench/nvml_telemetry.hpp"
#include "swapffn/backends.hpp"
#endif

namespace swapffn::cli {
namespace {

struct TuneArgs {
  std::string model, preset = "default", out = "swapffn-tune.json";
  std::vector<int64_t> batches{1, 4, 16, 64};
  int tokens = 8, repeats = 5;
  uint64_t seed = 1;
  bool gemms_only = false;
};

#ifdef SWAPFFN_WITH_CUDA
struct Point {
  int64_t batch;
  FusedChoice choice;
  double ms, sm_mhz;
};

// The FFN GEMMs alone, each dual GEMM tile beside cuBLAS on the same shapes (informative).
void print_gemm_timings(const Config& cfg, const TuneArgs& a) {
  std::vector<int> ms;
  for (int64_t b : a.batches) ms.push_back(static_cast<int>(b * cfg.core_count));
  std::printf("== FFN GEMMs alone (median of %d x 10 launches from a CUDA graph)\n", a.repeats * 4);
  std::printf("%-20s %7s %6s %6s %-20s %10s %8s\n", "gemm", "M", "N", "K", "tile", "us", "TF/s");
  for (const auto& t : cuda::time_ffn_gemms(int(cfg.d_model), int(cfg.d_ff), ms, a.repeats * 4, int(cfg.core_count)))
    std::printf("%-20s %7d %6d %6d %-20s %10.2f %8.1f %s\n", t.gemm.c_str(), t.m, t.n, t.k, t.label.c_str(), t.us,
                t.tflops, t.algo.c_str());
}

// The whole token step for every candidate choice at every batch size, with the SM clock over each
// (under a power cap the clock moves between points: a row compares only with rows at similar clocks).
std::vector<Point> time_candidates(const Weights& w, const TuneArgs& a) {
  const Config& cfg = w.cfg;
  std::unique_ptr<cuda::NvmlSampler> sampler;
  std::string note;
  try {
    sampler = std::make_unique<cuda::NvmlSampler>(std::chrono::milliseconds(5));
  } catch (const Error& e) {
    note = std::string(", unavailable: ") + e.what();
  }
  std::printf("\n== whole token step per choice (fused backend, CUDA graph; SM clock: NVML median%s)\n", note.c_str());
  std::printf("%6s %-20s %-7s %6s %10s %7s  %s\n", "B", "up", "router", "groups", "ms/step", "SM MHz", "clock limits");
  std::vector<FusedChoice> candidates;
  for (const DualGemmTile up : kDualGemmTiles)
    for (const auto& [router, groups] : {std::pair{EventHead::cublas, 1}, std::pair{EventHead::folded, 1},
                                         std::pair{EventHead::folded, 2}})
      if (router == EventHead::cublas || cfg.d_model <= 1024) {
        FusedChoice c;
        c.up = up;
        c.router = router;
        c.row_groups = groups;
        candidates.push_back(c);
      }
  std::vector<Point> points;
  for (int64_t b : a.batches)
    for (const FusedChoice& c : candidates) {
      EngineOptions eo;
      eo.fused.pinned = c;
      auto engine = make_engine("fused", w, eo);
      std::optional<TelemetrySummary> tel;
      const cuda::TimedWindow window =
          sampler ? cuda::TimedWindow{[&] { sampler->start(); }, [&] { tel = sampler->stop(); }} : cuda::TimedWindow{};
      const auto t = cuda::time_device_decode(*engine, State::init(cfg, b), a.tokens, 1, a.repeats, 2, a.seed, window);
      const double mhz = tel ? tel->sm_clock_mhz_median : 0;
      std::printf("%6lld %-20s %-7s %6d %10.4f %7.0f  %s\n", static_cast<long long>(b), to_string(*c.up),
                  to_string(*c.router), *c.row_groups, t.median_ms_per_step, mhz, tel ? tel->limits_text().c_str() : "-");
      points.push_back({b, c, t.median_ms_per_step, mhz});
    }
  return points;
}

// The event head fixes the summation order, so one head serves every batch size (batch invariance):
// the head with the smallest sum over B of its time relative to the best time at that B. Within it,
// the fastest tile and row groups per B.
std::vector<const Point*> choose(const std::vector<Point>& points) {
  std::map<int64_t, double> best_at;
  for (const auto& p : points) best_at[p.batch] = best_at.count(p.batch) ? std::min(best_at[p.batch], p.ms) : p.ms;
  std::map<EventHead, std::map<int64_t, const Point*>> by_head;
  for (const auto& p : points) {
    const Point*& slot = by_head[*p.choice.router][p.batch];
    if (!slot || p.ms < slot->ms) slot = &p;
  }
  std::vector<const Point*> chosen;
  double chosen_score = 1e30;
  for (const auto& [head, per_b] : by_head) {
    if (per_b.size() != best_at.size()) continue;
    double score = 0;
    for (const auto& [b, p] : per_b) score += p->ms / best_at[b];
    std::printf("head %-7s score %.4f (1.0 per batch size is the best possible)\n", to_string(head), score);
    if (score < chosen_score) {
      chosen_score = score;
      chosen.clear();
      for (const auto& [b, p] : per_b) chosen.push_back(p);
    }
  }
  SWAPFFN_REQUIRE(!chosen.empty(), "tune: no kernel choice ran at every batch size");
  std::printf("chosen: head %s\n", to_string(*chosen.front()->choice.router));
  return chosen;
}

void write_cache(const std::string& path, const GpuInfo& gpu, const Config& cfg, const std::vector<const Point*>& chosen) {
  nlohmann::json entries = nlohmann::json::array();
  for (const Point* p : chosen)
    entries.push_back({{"batch", p->batch},
                       {"up", to_string(*p->choice.up)},
                       {"router", to_string(*p->choice.router)},
                       {"groups", *p->choice.row_groups},
                       {"ms_per_step", p->ms},
                       {"sm_clock_mhz", p->sm_mhz}});
  const nlohmann::json j = {{"device", gpu.name}, {"d_model", cfg.d_model}, {"d_ff", cfg.d_ff}, {"entries", entries}};
  write_file_atomically(path, j.dump(2) + "\n");
  std::printf("\nwrote %s (use it with --tune on run, check or bench, or set SWAPFFN_TUNE_FILE)\n", path.c_str());
}

void run_tune(const TuneArgs& a) {
  const GpuInfo gpu = query_gpu();
  SWAPFFN_REQUIRE(gpu.is_hopper(), "swapffn tune needs a Hopper GPU: " + gpu.why_not_hopper());
  if (!a.gemms_only) check_writable(a.out);
  const Weights w = a.model.empty() ? Weights::random(Config::preset(a.preset), a.seed) : Weights::load(a.model);
  print_gemm_timings(w.cfg, a);
  if (a.gemms_only) return;
  write_cache(a.out, gpu, w.cfg, choose(time_candidates(w, a)));
}
#endif

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = add_command(app, "tune", "grid-search the fused backend's kernel choices on this GPU, write a cache",
                          "swapffn tune --batches 1,4,16,64 --out swapffn-tune.json");
  cmd->add_option("--model", a->model, "model file (default: random weights of --config)");
  cmd->add_option("--config", a->preset, "preset when no --model: default or tiny")->capture_default_str();
  cmd->add_option("--batches", a->batches, "batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "token steps per timed run")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timed runs per point")->capture_default_str();
  cmd->add_option("--out", a->out, "tuning cache to write")->capture_default_str();
  cmd->add_flag("--gemms-only", a->gemms_only,
                "only time the FFN GEMMs alone (each dual GEMM tile beside cuBLAS); writes no cache");
  cmd->callback([a] {
#ifdef SWAPFFN_WITH_CUDA
    run_tune(*a);
#else
    SWAPFFN_FAIL("swapffn tune needs a CUDA build (this build has no CUDA)");
#endif
  });
}

}  // namespace swapffn::cli
