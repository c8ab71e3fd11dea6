// swapffn tune: grid search of the fused backend's kernel variants on the present GPU.
// 1) times each FFN GEMM variant alone, beside cuBLAS on the same shape (informative);
// 2) times the whole token step for every (up, down, router, row groups) combination per batch size,
//    with the SM clock over each (NVML, where available), because the variants interact (L2
//    traffic, wave quantisation, overlap through programmatic launch and between row groups);
// 3) writes the winners per batch to a cache file that the engine reads (`--tune` of run, check and
//    bench, or SWAPFFN_TUNE_FILE).
#include <chrono>
#include <cstdio>
#include <fstream>
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
#include "swapffn/weights.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "bench/bench_runner.hpp"
#include "bench/ffn_gemm_timing.hpp"
#include "cuda/fused/fused_config.hpp"
#include "cuda/kernels/sm90_bf16_gemm_residual_cutlass.hpp"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "bench/nvml_telemetry.hpp"
#include "swapffn/engine.hpp"
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
void run_tune(const TuneArgs& a) {
  const GpuInfo gpu = query_gpu();
  SWAPFFN_REQUIRE(gpu.is_hopper(), "swapffn tune needs a Hopper GPU: " + (gpu.present ? gpu.name : gpu.why_absent));
  const Weights w = a.model.empty() ? Weights::random(Config::preset(a.preset), a.seed) : Weights::load(a.model);
  const Config& cfg = w.cfg;

  std::vector<int> ms;
  std::vector<cuda::GemmVariant> ups;  // the dual GEMM the engine runs at each batch size
  for (int64_t b : a.batches) {
    ms.push_back(static_cast<int>(b * cfg.core_count));
    ups.push_back(cuda::select_fused_config(cfg, b, "", "").up);
  }
  std::printf("== FFN GEMMs alone, the default GEMMs' halves (*_operands_only: loads alone; *_mma_only: MMAs and "
              "epilogue alone), then pair_dual_down: each down GEMM after the dual GEMM (median of %d x 10 launches)\n",
              a.repeats * 4);
  std::printf("%-16s %7s %6s %6s %-14s %10s %8s\n", "gemm", "M", "N", "K", "variant", "us", "TF/s");
  for (const auto& t :
       cuda::time_ffn_gemms(int(cfg.d_model), int(cfg.d_ff), ms, a.repeats * 4, int(cfg.core_count), ups))
    std::printf("%-16s %7d %6d %6d %-14s %10.2f %8.1f %s\n", t.gemm.c_str(), t.m, t.n, t.k,
                t.label.c_str(), t.us, t.tflops, t.algo.c_str());
  if (a.gemms_only) return;

  // The SM clock over each combination's timed runs: under a power cap the clock moves between
  // points, and a row is only comparable with another taken at a similar clock. Optional, as in bench.
  std::unique_ptr<cuda::NvmlSampler> sampler;
  std::string telemetry_note;
  try {
    sampler = std::make_unique<cuda::NvmlSampler>(std::chrono::milliseconds(5));
  } catch (const Error& e) {
    telemetry_note = e.what();
  }
  std::printf("\n== whole token step per combination (fused backend, CUDA graph; SM clock: median over the timed "
              "runs, NVML%s%s)\n",
              telemetry_note.empty() ? "" : ", unavailable: ", telemetry_note.c_str());
  std::printf("%6s %-18s %-18s %-7s %6s %10s %7s  %s\n", "B", "up", "down", "router", "groups", "ms/step", "SM MHz",
              "clock limits");
  struct Point {
    int64_t batch;
    std::string up, down, router;
    int groups;
    double ms, sm_mhz;
  };
  std::vector<Point> points;
  std::vector<std::string> downs{"cublas"};
  for (const auto& down : cuda::down_gemm_variants())
    if (down.split_k > 1 && cuda::down_variant_fits(down, cfg.d_model, cfg.d_ff)) downs.push_back(down.name());
  for (const auto& down : cuda::cutlass_down_variants()) downs.push_back(down);
  for (int64_t b : a.batches)
    for (const auto& up : cuda::dual_gemm_variants())
      for (const auto& down : downs)
        for (const auto& [router, groups] : {std::pair{"cublas", 1}, std::pair{"event", 1}, std::pair{"event", 2},
                                             std::pair{"folded", 1}, std::pair{"folded", 2}}) {
          if (std::string(router) == "event" && (cfg.d_router % 16 != 0 || cfg.d_router > 64)) continue;
          if (std::string(router) != "cublas" && cfg.d_model > 1024) continue;
          EngineOptions eo;
          eo.kernel_config = "up=" + up.name() + ",down=" + down + ",router=" + router + ",groups=" + std::to_string(groups);
          auto engine = make_engine("fused", w, eo);
          std::optional<TelemetrySummary> tel;
          const cuda::TimedWindow window =
              sampler ? cuda::TimedWindow{[&] { sampler->start(); }, [&] { tel = sampler->stop(); }} : cuda::TimedWindow{};
          const auto t =
              cuda::time_device_decode(*engine, State::init(cfg, b), a.tokens, 1, a.repeats, 2, a.seed, window);
          const double mhz = tel ? tel->sm_clock_mhz_median : 0;
          std::printf("%6lld %-18s %-18s %-7s %6d %10.4f %7.0f  %s\n", static_cast<long long>(b), up.name().c_str(),
                      down.c_str(), router, groups, t.median_ms_per_step, mhz, tel ? tel->limits_text().c_str() : "-");
          points.push_back({b, up.name(), down, router, groups, t.median_ms_per_step, mhz});
        }

  // The router and the down GEMM's implementation fix the summation order, so one choice serves
  // every batch size (batch invariance): the class with the smallest sum over B of its time relative
  // to the best time at that B. Within it, the fastest tile variants per B.
  const auto numerics = [](const Point& p) { return p.router + "/" + cuda::down_numerics(p.down); };
  std::map<int64_t, double> best_at;
  for (const auto& p : points) best_at[p.batch] = best_at.count(p.batch) ? std::min(best_at[p.batch], p.ms) : p.ms;
  std::map<std::string, std::map<int64_t, const Point*>> by_class;
  for (const auto& p : points) {
    const Point*& slot = by_class[numerics(p)][p.batch];
    if (!slot || p.ms < slot->ms) slot = &p;
  }
  std::string chosen;
  double chosen_score = 1e30;
  for (const auto& [cls, per_b] : by_class) {
    if (per_b.size() != best_at.size()) continue;
    double score = 0;
    for (const auto& [b, p] : per_b) score += p->ms / best_at[b];
    std::printf("class %-14s score %.4f (1.0 per batch size is the best possible)\n", cls.c_str(), score);
    if (score < chosen_score) {
      chosen_score = score;
      chosen = cls;
    }
  }
  SWAPFFN_REQUIRE(!chosen.empty(), "tune: no kernel configuration ran at every batch size");
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [b, p] : by_class[chosen])
    entries.push_back({{"batch", b},
                       {"up", p->up},
                       {"down", p->down},
                       {"router", p->router},
                       {"groups", p->groups},
                       {"ms_per_step", p->ms},
                       {"sm_clock_mhz", p->sm_mhz}});
  std::printf("chosen: %s\n", chosen.c_str());
  const nlohmann::json j = {{"device", gpu.name}, {"d_model", cfg.d_model}, {"d_ff", cfg.d_ff}, {"entries", entries}};
  std::ofstream out(a.out);
  SWAPFFN_REQUIRE(out.good(), "cannot write " + a.out);
  out << j.dump(2) << "\n";
  out.close();
  SWAPFFN_REQUIRE(out.good(), "failed writing " + a.out);
  std::printf("\nwrote %s (use it with --tune on run, check or bench, or set SWAPFFN_TUNE_FILE)\n", a.out.c_str());
}
#endif

}  // namespace

void add_tune_command(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand("tune", "grid-search the fused backend's kernel variants on this GPU");
  cmd->add_option("--model", a->model, "model file (default: random weights of --config)");
  cmd->add_option("--config", a->preset, "preset when no --model: default or tiny")->capture_default_str();
  cmd->add_option("--batches", a->batches, "batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "token steps per timed run")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timed runs per point")->capture_default_str();
  cmd->add_option("--out", a->out, "tuning cache to write")->capture_default_str();
  cmd->add_flag("--gemms-only", a->gemms_only,
                "only time the FFN GEMM variants alone, the default GEMMs' operand loads and MMAs apart, and the "
                "down GEMMs after the dual GEMM as in a step (writes no cache)");
  cmd->callback([a] {
#ifdef SWAPFFN_WITH_CUDA
    run_tune(*a);
#else
    SWAPFFN_FAIL("swapffn tune needs a CUDA build (this build has no CUDA)");
#endif
  });
}

}  // namespace swapffn::cli
