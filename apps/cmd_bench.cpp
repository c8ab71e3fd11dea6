// swapffn bench: token-step time of each backend for several batch sizes, against the floor set by
// this GPU's dense bf16 GEMM rate measured in the same run (SPEC section 6), against cuBLAS's FFN
// GEMMs alone (the anchor, `cublas-ffn-gemms`) and against the unfused path. The flags and the
// printing live here; the rows, their measurement, the report and the JSON in src/bench
// (bench_rows, bench_session, bench_report, gpu_point_timer), testable without this binary.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_session.hpp"
#include "commands.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/weights.hpp"
#include "swapffn_commit.hpp"

namespace swapffn::cli {
namespace {

using bench::kSeed;

struct BenchArgs {
  std::string model, preset = "default", json;
  std::vector<std::string> backends;
  bool python = false;
  FusedFlags fused;
  std::string fp8_kernels;  // fused-fp8's pinned kernel choices
  bench::BenchOptions o;  // what the flags set directly
};

// The commit to report: SWAPFFN_COMMIT when set (a binary carried to another machine), else the build's.
std::string source_commit() {
  const char* c = std::getenv("SWAPFFN_COMMIT");
  return c && *c ? c : SWAPFFN_GIT_COMMIT;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void check_args(const BenchArgs& a) {
  SWAPFFN_REQUIRE(a.o.tokens > 0 && a.o.repeats > 0 && a.o.warmup >= 0, "--tokens and --repeats must be > 0");
  SWAPFFN_REQUIRE(a.o.cooldown_s >= 0 && a.o.cooldown_s <= 600, "--cooldown must be 0 to 600 seconds");
  SWAPFFN_REQUIRE(!a.o.batches.empty(), "--batches is empty");
  for (int64_t b : a.o.batches) SWAPFFN_REQUIRE(b > 0, "batch sizes must be > 0 (got " + std::to_string(b) + ")");
}

// The requested backends, or all compiled in; the reference runs only on the tiny config.
std::vector<std::string> backends_to_run(const BenchArgs& a, bool tiny, const GpuInfo& gpu) {
  const bool explicit_list = !a.backends.empty();
  std::vector<std::string> out;
  for (const auto& b : explicit_list ? a.backends : backend_names()) {
    const BackendFacts& facts = backend_facts(b);
    if (!facts.needs_cuda && !tiny) {  // a host backend takes minutes per point on the default config
      SWAPFFN_REQUIRE(!explicit_list, "backend '" + b + "' is benchmarked only with --config tiny");
      std::printf("skipped: %s (only on --config tiny)\n", b.c_str());
      continue;
    }
    if (facts.needs_cuda && !gpu.is_hopper()) {
      SWAPFFN_REQUIRE(!explicit_list, "backend '" + b + "' needs a Hopper GPU (" + gpu.why_not_hopper() +
                                          "); only '--backends reference --config tiny' runs without one");
      std::printf("skipped: %s (no Hopper GPU)\n", b.c_str());
      continue;
    }
    out.push_back(b);
  }
  SWAPFFN_REQUIRE(!out.empty(), "nothing to benchmark (without a GPU only the reference runs, on --config tiny)");
  return out;
}

// The model file --python's row loads: --model, or the bench's random weights in a temporary file
// (removed with this). No path, and a note, when the row cannot run: it times the fused backend.
class PythonModel {
 public:
  PythonModel(const BenchArgs& a, const Weights& w, const std::vector<std::string>& backends) {
    if (!a.python) return;
    if (std::find(backends.begin(), backends.end(), "fused") == backends.end()) {
      note = "it times the fused backend's slot step, which this bench does not run";
      std::printf("skipped: python (%s)\n", note.c_str());
    } else if (!a.model.empty()) {
      path = a.model;
    } else {
      temp_ = (std::filesystem::temp_directory_path() / ("swapffn-bench-" + std::to_string(getpid()) + ".safetensors"))
                  .string();
      w.save(temp_);
      path = temp_;
    }
  }
  ~PythonModel() {
    if (!temp_.empty()) std::remove(temp_.c_str());
  }
  PythonModel(const PythonModel&) = delete;
  PythonModel& operator=(const PythonModel&) = delete;

  std::string path, note;

 private:
  std::string temp_;
};

void run_bench(const BenchArgs& a) {
  check_args(a);
  if (!a.json.empty()) check_writable(a.json);
  const Weights w = a.model.empty() ? Weights::random(Config::preset(a.preset), kSeed) : Weights::load(a.model);
  const GpuInfo gpu = query_gpu();
  std::printf("swapffn bench: %s, commit %s (binary built at %s), %s\n", gpu.present ? gpu.name.c_str() : "no GPU",
              source_commit().c_str(), SWAPFFN_GIT_COMMIT, utc_now().c_str());
  const std::vector<std::string> backends = backends_to_run(a, a.model.empty() && a.preset == "tiny", gpu);
  const auto runs = [&](const char* b) { return std::find(backends.begin(), backends.end(), b) != backends.end(); };
  SWAPFFN_REQUIRE(a.fused.tune_file.empty() || runs("fused"),
                  "--tune applies to the fused backend, which this bench does not run");
  SWAPFFN_REQUIRE(a.fp8_kernels.empty() || runs("fused-fp8"),
                  "--fp8-kernels applies to the fused-fp8 backend, which this bench does not run");
  std::printf("config %s: %.4g GFLOP per token per sequence; %d tokens x %d repeats (+%d warm-up) per point\n",
              a.model.empty() ? a.preset.c_str() : a.model.c_str(), w.cfg.flops_per_token() * 1e-9, a.o.tokens,
              a.o.repeats, a.o.warmup);
  const PythonModel python(a, w, backends);
  bench::BenchOptions o = a.o;
  if (runs("fused")) o.fused = a.fused.resolve(w.cfg, "fused");
  o.fp8_pinned = parse_fused_choice(a.fp8_kernels);
  o.python_model = python.path;
  bench::BenchResults res = bench::measure(o, w, backends);
  if (res.python_note.empty()) res.python_note = python.note;
  if (res.floor_tflops > 0)
    std::printf("floor: bf16 GEMM %dx%dx%d at %.1f TFLOP/s -> %.4f ms per token step per sequence (at the start)\n",
                bench::kFloorN, bench::kFloorN, bench::kFloorN, res.floor_tflops, w.cfg.flops_per_token() / (res.floor_tflops * 1e12) * 1e3);
  if (res.floor_telemetry) std::printf("floor GEMM telemetry: %s\n", bench::telemetry_text(*res.floor_telemetry).c_str());
  if (!res.telemetry_note.empty()) std::printf("GPU telemetry: unavailable: %s\n", res.telemetry_note.c_str());
  if (!res.power_note.empty()) std::printf("GPU telemetry: no power readings: %s\n", res.power_note.c_str());
  std::fputs(bench::report_text(res, w.cfg).c_str(), stdout);
  for (const FlipRate& f : res.flips)
    std::printf("flip rate of %s vs %s (bf16), per token over %lld tokens at B=%lld: %s\n", f.engine.c_str(),
                f.baseline.c_str(), static_cast<long long>(f.tokens), static_cast<long long>(f.batch),
                f.per_token().c_str());
  if (a.json.empty()) return;
  const bench::BenchRunInfo info{gpu.present ? gpu.name : "none", gpu.present ? std::to_string(gpu.driver_version) : "",
                                 gpu.present ? std::to_string(gpu.runtime_version) : "", source_commit(),
                                 SWAPFFN_GIT_COMMIT, utc_now(), a.o.tokens, a.o.repeats, a.o.warmup, a.o.cooldown_s};
  write_file_atomically(a.json, bench::bench_json(res, info, w.cfg).dump(2) + "\n");
  std::printf("wrote %s\n", a.json.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = add_command(app, "bench", "time token steps per backend and batch size against the GEMM floor and cuBLAS",
                          "swapffn bench --config default --batches 1,16,64 --backends unfused,fused --json bench.json");
  cmd->add_option("--model", a->model, "model file (default: random parameters of --config)");
  cmd->add_option("--config", a->preset, "config preset when no --model: default or tiny")->capture_default_str();
  cmd->add_option("--backends", a->backends, "backends, comma-separated (default: all that can run here)")
      ->delimiter(',');
  cmd->add_option("--batches", a->o.batches, "batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", a->o.tokens, "token steps per timed run")->capture_default_str();
  cmd->add_option("--warmup", a->o.warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--repeats", a->o.repeats, "timed runs (the median is reported)")->capture_default_str();
  cmd->add_option("--cooldown", a->o.cooldown_s, "seconds idle before each GPU point and before its matched floor")
      ->capture_default_str();
  cmd->add_option("--json", a->json, "also write the results as JSON to this file");
  cmd->add_flag("--python", a->python,
                "also time the fused slot step through the Python API from torch CUDA graphs (python3 -m "
                "swapffn.bench_row; $SWAPFFN_PYTHON names another interpreter)");
  cmd->add_option("--tune", a->fused.tune_file,
                  "fused backend: tuning cache written by `swapffn tune` (default: $SWAPFFN_TUNE_FILE)");
  cmd->add_flag("--fp8-headroom", a->o.fp8_headroom,
                "also time the fp8 GEMMs with per-row/channel and per-tensor scales (the headroom of coarser scalings)");
  cmd->add_option("--fp8-kernels", a->fp8_kernels,
                  "fused-fp8: pinned kernel choices, e.g. 'fp8up=sm90,groups=2' (scales=rows|blocks: that scaling "
                  "only; by default both are timed)");
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace swapffn::cli
