// swapffn tune: grid search of the fused backend's kernel variants on the present GPU.
// 1) times each FFN GEMM variant alone, beside cuBLAS on the same shape (informative);
// 2) times the whole token step for every (up, down) combination per batch size, because the
//    variants interact (L2 traffic, wave quantisation, overlap through programmatic launch);
// 3) writes the winners per batch to a cache file that the engine reads (--tune / SWAPFFN_TUNE_FILE).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/weights.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "cuda/bench_runner.hpp"
#include "cuda/fused/ffn_gemm_timing.hpp"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "swapffn/engine.hpp"
#endif

namespace swapffn::cli {
namespace {

struct TuneArgs {
  std::string model, preset = "default", out = "swapffn-tune.json";
  std::vector<int64_t> batches{1, 4, 16, 64};
  int tokens = 8, repeats = 5;
  uint64_t seed = 1;
};

#ifdef SWAPFFN_WITH_CUDA
void run_tune(const TuneArgs& a) {
  const GpuInfo gpu = query_gpu();
  SWAPFFN_REQUIRE(gpu.is_hopper(), "swapffn tune needs a Hopper GPU: " + (gpu.present ? gpu.name : gpu.why_absent));
  const Weights w = a.model.empty() ? Weights::random(Config::preset(a.preset), a.seed) : Weights::load(a.model);
  const Config& cfg = w.cfg;

  std::vector<int> ms;
  for (int64_t b : a.batches) ms.push_back(static_cast<int>(b * cfg.core_count));
  std::printf("== FFN GEMMs alone (median of %d x 10 launches)\n", a.repeats * 4);
  std::printf("%-16s %7s %6s %6s %-14s %10s %8s\n", "gemm", "M", "N", "K", "variant", "us", "TF/s");
  for (const auto& t : cuda::time_ffn_gemms(int(cfg.d_model), int(cfg.d_ff), ms, a.repeats * 4))
    std::printf("%-16s %7d %6d %6d %-14s %10.2f %8.1f\n", t.gemm.c_str(), t.m, t.n, t.k,
                t.gemm.rfind("cublas", 0) == 0 ? "-" : t.variant.name().c_str(), t.us, t.tflops);

  std::printf("\n== whole token step per (up, down) combination (fused backend, CUDA graph)\n");
  std::printf("%6s %-18s %-18s %-7s %10s\n", "B", "up", "down", "router", "ms/step");
  nlohmann::json entries = nlohmann::json::array();
  for (int64_t b : a.batches) {
    double best = 1e30;
    std::string best_up, best_down, best_router;
    std::vector<std::string> downs{"cublas"};
    for (const auto& down : cuda::down_gemm_variants())
      if (down.split_k == 2 && cfg.d_model % (down.bn * down.multicast) == 0) downs.push_back(down.name());
    for (const auto& up : cuda::dual_gemm_variants())
      for (const auto& down : downs)
        for (const char* router : {"cublas", "event"}) {
          if ((2 * cfg.d_ff) % up.bn != 0) continue;
          EngineOptions eo;
          eo.kernel_config = "up=" + up.name() + ",down=" + down + ",router=" + router;
          auto engine = make_engine("fused", w, eo);
          const auto t = cuda::time_device_decode(*engine, State::init(cfg, b), a.tokens, 1, a.repeats, 2, a.seed);
          std::printf("%6lld %-18s %-18s %-7s %10.4f\n", static_cast<long long>(b), up.name().c_str(),
                      down.c_str(), router, t.median_ms_per_step);
          if (t.median_ms_per_step < best) {
            best = t.median_ms_per_step;
            best_up = up.name();
            best_down = down;
            best_router = router;
          }
        }
    entries.push_back(
        {{"batch", b}, {"up", best_up}, {"down", best_down}, {"router", best_router}, {"ms_per_step", best}});
  }
  const nlohmann::json j = {{"device", gpu.name}, {"d_model", cfg.d_model}, {"d_ff", cfg.d_ff}, {"entries", entries}};
  std::ofstream out(a.out);
  SWAPFFN_REQUIRE(out.good(), "cannot write " + a.out);
  out << j.dump(2) << "\n";
  std::printf("\nwrote %s (use with --tune or SWAPFFN_TUNE_FILE)\n", a.out.c_str());
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
  cmd->callback([a] {
#ifdef SWAPFFN_WITH_CUDA
    run_tune(*a);
#else
    SWAPFFN_FAIL("swapffn tune needs a CUDA build (this build has no CUDA)");
#endif
  });
}

}  // namespace swapffn::cli
