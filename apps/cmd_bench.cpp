// swapffn bench: token-step time of each backend for several batch sizes, against the floor set by
// this GPU's dense bf16 GEMM rate measured in the same run (SPEC section 6), against cuBLAS's FFN
// GEMMs alone (the anchor, `cublas-ffn-gemms`) and against the unfused path.
// A GPU's clock follows its power and temperature limits (a lent H100 reached its 700 W cap within
// a second of load), so the points run batch by batch, every row at one batch size back to back;
// each GPU point starts after --cooldown seconds idle and gets a matched floor: the floor GEMM after
// the same pause for as long as the point ran, so a point's distance to the floor splits into the
// machine's sustained clock and the kernels. NVML telemetry (SM clock, temperature, power, clock
// limits) over each point and floor shows the clock itself. With --python, the fused slot step is
// also timed through the Python API from torch CUDA graphs (bench/python_row.hpp, a child process).
// An fp8 backend (fused-fp8) is set against cuBLAS's fp8 FFN GEMMs (`cublas-fp8-gemms`) and against
// its bf16 twin (fused) in the same run. --fp8-headroom adds the same fp8 GEMMs with coarser scales
// than the recipe's (per row and channel, per tensor): the fp8 / bf16 headroom each scaling has.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/python_row.hpp"
#include "bench/telemetry.hpp"
#include "commands.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/flip_rate.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"
#include "swapffn_commit.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "bench/bench_runner.hpp"
#include "bench/nvml_telemetry.hpp"
#endif

namespace swapffn::cli {
namespace {

constexpr const char* kAnchor = "cublas-ffn-gemms";  // cuBLAS's FFN GEMMs alone (bench/cublas_ffn_gemms.hpp)
constexpr const char* kFp8Anchor = "cublas-fp8-gemms";  // the same in e4m3 with block scales
// The fp8 GEMMs with one scale per row of x and u and per channel of W, and with one per tensor.
constexpr const char* kFp8RowsAnchor = "cublas-fp8-rows";
constexpr const char* kFp8TensorAnchor = "cublas-fp8-tensor";
constexpr const char* kSlotsSuffix = "[slots]";  // a backend's step through a state pool of 4B slots
constexpr const char* kPythonRow = "python[slots]";  // fused[slots] through the Python API (--python)
constexpr int kFloorN = 8192;                         // the square GEMM that sets the floor
constexpr int64_t kFlipBatch = 4, kFlipTokens = 16;  // issue 41: the flip rate over 16 tokens at B = 4
constexpr uint64_t kSeed = 1;                         // parameters (without --model), state and inputs
constexpr double kTelemetryMs = 5;                    // NVML sampling period
constexpr double kSpreadNote = 0.05;  // rows whose timed runs differ by more: the clock moved
// Power readings refresh every few tens of ms and trail the load: shorter windows get no power figure.
constexpr double kPowerMinSeconds = 0.5;

struct BenchArgs {
  std::string model, preset = "default", json;
  std::vector<std::string> backends;
  std::vector<int64_t> batches{1, 4, 16, 64};
  int tokens = 16, warmup = 2, repeats = 5;
  double cooldown_s = 3;
  bool python = false;
  bool fp8_headroom = false;
  FusedFlags fused;
  std::string fp8_kernels;  // fused-fp8's pinned kernel choices
};

struct Row {
  Row(std::string b, int64_t n, std::string d = "", std::string p = "bf16")
      : backend(std::move(b)), batch(n), dense(std::move(d)), precision(std::move(p)) {}
  std::string backend;
  int64_t batch = 0;
  std::string dense;      // a slot-step row: the backend whose dense step of this batch it is set against
  std::string precision;  // of the GEMM operands: an fp8 row is set against the fp8 anchor
  double ms = 0;
  double matched_floor_tflops = 0;  // the floor GEMM under this point's load history (GPU points)
  double spread = 0;                // (slowest - fastest) / median of the timed runs (GPU points)
  double same_process_cpp_ms = 0;   // python row: the engine's own slot-step replays, in the row's process
  std::optional<TelemetrySummary> telemetry, matched_floor_telemetry;
};

bool is_gpu_backend(const std::string& b) { return b != "reference"; }
bool is_anchor(const std::string& b) {
  return b == kAnchor || b == kFp8Anchor || b == kFp8RowsAnchor || b == kFp8TensorAnchor;
}
// The bf16 row an fp8 row is set against: fused-fp8 -> fused, the fp8 anchor -> the bf16 anchor.
std::string bf16_twin(const std::string& fp8_row) {
  if (is_anchor(fp8_row)) return kAnchor;
  const std::string suffix = "-fp8";
  const size_t n = fp8_row.size();
  return n > suffix.size() && fp8_row.compare(n - suffix.size(), suffix.size(), suffix) == 0
             ? fp8_row.substr(0, n - suffix.size())
             : "";
}
bool power_known(const TelemetrySummary& t) { return t.power_w_mean > 0 && t.seconds >= kPowerMinSeconds; }

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

nlohmann::json telemetry_json(const std::optional<TelemetrySummary>& t) {
  if (!t) return nullptr;
  nlohmann::json limits = nlohmann::json::object();
  for (int b = 0; b < kClockLimitCount; ++b)
    limits[clock_limit_name(ClockLimit(1u << b))] = t->limit_share(ClockLimit(1u << b));
  return {{"samples", t->samples},
          {"seconds", t->seconds},
          {"sm_clock_mhz_median", t->sm_clock_mhz_median},
          {"sm_clock_mhz_min", t->sm_clock_mhz_min},
          {"sm_clock_mhz_max", t->sm_clock_mhz_max},
          {"temperature_c_max", t->temperature_c_max},
          {"power_w_mean", power_known(*t) ? nlohmann::json(t->power_w_mean) : nlohmann::json()},
          {"power_w_max", power_known(*t) ? nlohmann::json(t->power_w_max) : nlohmann::json()},
          {"clock_limit_share", limits}};
}

// "1755 [1610-1980]  699 W  71 C  power 95%" ("   - W" where the power is not known)
std::string telemetry_text(const TelemetrySummary& t) {
  char power[16] = "   -";
  if (power_known(t)) std::snprintf(power, sizeof(power), "%4.0f", t.power_w_mean);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%4.0f [%4.0f-%4.0f]  %s W  %3.0f C  ", t.sm_clock_mhz_median, t.sm_clock_mhz_min,
                t.sm_clock_mhz_max, power, t.temperature_c_max);
  return buf + t.limits_text();
}

// A point's rate per SM clock against its matched floor's (0 without both clocks).
double pct_matched_per_clock(const Row& r, double pct_matched) {
  if (!r.telemetry || !r.matched_floor_telemetry || r.telemetry->sm_clock_mhz_median <= 0) return 0;
  return pct_matched * r.matched_floor_telemetry->sm_clock_mhz_median / r.telemetry->sm_clock_mhz_median;
}

std::string fmt_ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3fx", x);
  return buf;
}

void check_args(const BenchArgs& a) {
  SWAPFFN_REQUIRE(a.tokens > 0 && a.repeats > 0 && a.warmup >= 0, "--tokens and --repeats must be > 0");
  SWAPFFN_REQUIRE(a.cooldown_s >= 0 && a.cooldown_s <= 600, "--cooldown must be 0 to 600 seconds");
  SWAPFFN_REQUIRE(!a.batches.empty(), "--batches is empty");
  for (int64_t b : a.batches) SWAPFFN_REQUIRE(b > 0, "batch sizes must be > 0 (got " + std::to_string(b) + ")");
}

// The requested backends, or all compiled in; the reference runs only on the tiny config.
std::vector<std::string> backends_to_run(const BenchArgs& a, bool tiny, const GpuInfo& gpu) {
  const bool explicit_list = !a.backends.empty();
  std::vector<std::string> out;
  for (const auto& b : explicit_list ? a.backends : backend_names()) {
    if (b == "reference" && !tiny) {
      SWAPFFN_REQUIRE(!explicit_list, "backend 'reference' is benchmarked only with --config tiny");
      std::printf("skipped: reference (only on --config tiny)\n");
      continue;
    }
    if (is_gpu_backend(b) && !gpu.is_hopper()) {
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

// Host backends (the reference): wall time of decode() over `tokens` steps, median of repeats.
double time_host_decode(Engine& e, const State& initial, const BenchArgs& a) {
  State s = initial;
  const int64_t n = static_cast<int64_t>(a.tokens) * s.batch * e.config().d_model;
  std::vector<float> delta(static_cast<size_t>(n));
  std::vector<double> ms;
  for (int r = 0; r < a.warmup + a.repeats; ++r) {
    const std::vector<float> x =
        decode_inputs(mix_seed(kSeed, static_cast<uint64_t>(r)), a.tokens, s.batch, e.config().d_model);
    const auto t0 = std::chrono::steady_clock::now();
    e.decode(x.data(), delta.data(), a.tokens, s);
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= a.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / a.tokens);
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

#ifdef SWAPFFN_WITH_CUDA
// GPU measurements: the floor GEMM, telemetry windows, and points with their matched floors.
class GpuTimer {
 public:
  explicit GpuTimer(double cooldown_s) : cooldown_s_(cooldown_s) {
    try {  // NVML is optional: without it the times stand, and the output says why it is absent
      sampler_ = std::make_unique<cuda::NvmlSampler>(std::chrono::microseconds(static_cast<int64_t>(kTelemetryMs * 1000)));
      if (!sampler_->has_power()) power_note = sampler_->why_no_power();
    } catch (const Error& e) {
      telemetry_note = e.what();
    }
    floor_tflops = cuda::measure_bf16_gemm_tflops(kFloorN, 3, 10, 0, window(floor_telemetry));
  }

  // After the cool-down, `timed` measures the point over a telemetry window; then the matched floor.
  // False (no floor) when `timed` could not measure.
  bool point(Row& r, const std::function<std::optional<cuda::DecodeTiming>(const cuda::TimedWindow&)>& timed) {
    cool();
    const auto t0 = std::chrono::steady_clock::now();
    const std::optional<cuda::DecodeTiming> t = timed(window(r.telemetry));
    if (!t) return false;
    const double point_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cool();
    r.matched_floor_tflops = cuda::measure_bf16_gemm_tflops(kFloorN, 3, 10, point_ms, window(r.matched_floor_telemetry));
    r.ms = t->median_ms_per_step;
    r.spread = (t->max_ms_per_step - t->min_ms_per_step) / t->median_ms_per_step;
    return true;
  }

  double floor_tflops = 0;
  std::optional<TelemetrySummary> floor_telemetry;
  std::string telemetry_note, power_note;  // why there is no telemetry, or no power in it

 private:
  cuda::TimedWindow window(std::optional<TelemetrySummary>& out) {
    if (!sampler_) return {};
    return {[this] { sampler_->start(); }, [this, &out] { out = sampler_->stop(); }};
  }
  void cool() const { std::this_thread::sleep_for(std::chrono::duration<double>(cooldown_s_)); }

  double cooldown_s_;
  std::unique_ptr<cuda::NvmlSampler> sampler_;
};
#endif

struct Results {
  std::vector<Row> rows;
  double floor_tflops = 0;
  std::optional<TelemetrySummary> floor_telemetry;
  std::string telemetry_note, power_note;
  std::string python_note;  // why --python's row did not run
  nlohmann::json anchor_algorithms = nlohmann::json::object();  // cuBLASLt's picks for the anchor, per batch
  nlohmann::json fp8_anchor_algorithms = nlohmann::json::object();  // and for each fp8 anchor row, per batch
  std::optional<FlipRate> flips;  // an fp8 backend's free-running decisions against fused (bf16)
};

// What an fp8 backend trades: its free-running decision flip rate against fused (bf16) on the
// bench's weights, when both run.
std::optional<FlipRate> fp8_flip_rate(const std::vector<std::pair<std::string, std::unique_ptr<Engine>>>& engines) {
  Engine *fp8 = nullptr, *bf16 = nullptr;
  for (const auto& [name, engine] : engines) {
    if (engine->precision() == "fp8") fp8 = engine.get();
    if (name == "fused") bf16 = engine.get();
  }
  if (!fp8 || !bf16) return std::nullopt;
  return decision_flip_rate(*fp8, *bf16, kFlipBatch, kFlipTokens, kSeed);
}

#ifdef SWAPFFN_WITH_CUDA
// The python[slots] row at `batch` (model: a file of the bench's weights; kernels: the fused
// choices the C++ engine runs at this batch), or the first time it cannot run, a line that says why
// (and no more tries).
void add_python_row(GpuTimer& gpu, const BenchArgs& a, const std::string& model, const std::string& kernels,
                    int64_t batch, Results& res) {
  if (!res.python_note.empty()) return;
  Row r{kPythonRow, batch, "fused"};
  const bool ran = gpu.point(r, [&](const cuda::TimedWindow&) -> std::optional<cuda::DecodeTiming> {
    const PythonRowResult p =
        run_python_row({python_interpreter(), model, "fused", kernels, batch, a.tokens, a.warmup, a.repeats});
    if (!p.ran) {
      res.python_note = p.why_not;
      return std::nullopt;
    }
    r.same_process_cpp_ms = p.engine_decode_ms;
    return cuda::DecodeTiming{p.median_ms, p.min_ms, p.max_ms};
  });
  if (ran) {
    res.rows.push_back(r);
    std::fprintf(stderr, "  %s B=%lld: %.4f ms/step\n", r.backend.c_str(), static_cast<long long>(batch), r.ms);
  } else {
    std::printf("skipped: python (%s)\n", res.python_note.c_str());
  }
}
#endif

// Every row of every batch size: the anchor first (GPU; then the fp8 anchor when an fp8 backend
// runs), then each backend; with a python_model, the python row after the fused ones.
Results measure(const BenchArgs& a, const Weights& w, const std::vector<std::string>& backends,
                const std::string& python_model) {
  std::vector<std::pair<std::string, std::unique_ptr<Engine>>> engines;
  SWAPFFN_REQUIRE(a.fused.tune_file.empty() || std::find(backends.begin(), backends.end(), "fused") != backends.end(),
                  "--tune applies to the fused backend, which this bench does not run");
  SWAPFFN_REQUIRE(a.fp8_kernels.empty() || std::find(backends.begin(), backends.end(), "fused-fp8") != backends.end(),
                  "--fp8-kernels applies to the fused-fp8 backend, which this bench does not run");
  FusedOptions fused;
  for (const auto& b : backends) {
    EngineOptions eo;
    if (b == "fused") eo.fused = fused = a.fused.resolve(w.cfg, b);
    if (b == "fused-fp8") eo.fused.pinned = parse_fused_choice(a.fp8_kernels);
    engines.emplace_back(b, make_engine(b, w, eo));
  }
  Results res;
  const bool on_gpu = std::any_of(backends.begin(), backends.end(), is_gpu_backend);
  if (a.fp8_headroom && !on_gpu) std::printf("skipped: --fp8-headroom (its rows time cuBLASLt's GEMMs on a GPU)\n");
#ifdef SWAPFFN_WITH_CUDA
  const bool any_fp8 = std::any_of(engines.begin(), engines.end(), [](const auto& e) { return e.second->precision() == "fp8"; });
  std::unique_ptr<GpuTimer> gpu;
  if (on_gpu) {
    gpu = std::make_unique<GpuTimer>(a.cooldown_s);
    res.floor_tflops = gpu->floor_tflops;
    res.floor_telemetry = gpu->floor_telemetry;
    res.telemetry_note = gpu->telemetry_note;
    res.power_note = gpu->power_note;
  }
#else
  SWAPFFN_REQUIRE(!on_gpu, "GPU backends need a CUDA build");
  (void)python_model;  // its row times the fused backend, which needs one too
#endif
  const auto log = [](const Row& r) {
    std::fprintf(stderr, "  %s B=%lld: %.4f ms/step\n", r.backend.c_str(), static_cast<long long>(r.batch), r.ms);
  };
  for (int64_t batch : a.batches) {
    const State initial = State::random(w.cfg, batch, kSeed);
#ifdef SWAPFFN_WITH_CUDA
    if (gpu) {
      Row r{kAnchor, batch};
      std::string algorithms;
      gpu->point(r, [&](const cuda::TimedWindow& win) {
        return cuda::time_cublas_ffn_gemms(w, batch, a.tokens, a.warmup, a.repeats, kSeed, win, &algorithms);
      });
      res.anchor_algorithms[std::to_string(batch)] = algorithms;
      res.rows.push_back(r);
      log(r);
    }
    using cuda::AnchorOperands;
    for (const auto& [name, operands] : {std::pair{kFp8Anchor, AnchorOperands::e4m3_blocks},
                                         std::pair{kFp8RowsAnchor, AnchorOperands::e4m3_rows},
                                         std::pair{kFp8TensorAnchor, AnchorOperands::e4m3_tensor}}) {
      if (!gpu || !(a.fp8_headroom || (any_fp8 && operands == AnchorOperands::e4m3_blocks))) continue;
      Row r{name, batch, "", "fp8"};
      std::string algorithms;
      gpu->point(r, [&](const cuda::TimedWindow& win) {
        return cuda::time_cublas_ffn_gemms(w, batch, a.tokens, a.warmup, a.repeats, kSeed, win, &algorithms, operands);
      });
      res.fp8_anchor_algorithms[name][std::to_string(batch)] = algorithms;
      res.rows.push_back(r);
      log(r);
    }
#endif
    for (auto& [name, engine] : engines) {
      Row r{name, batch, "", engine->precision()};
#ifdef SWAPFFN_WITH_CUDA
      if (is_gpu_backend(name))
        gpu->point(r, [&](const cuda::TimedWindow& win) {
          return cuda::time_device_decode(*engine, initial, a.tokens, a.warmup, a.repeats, 4, kSeed, win);
        });
#endif
      if (!is_gpu_backend(name)) r.ms = time_host_decode(*engine, initial, a);
      res.rows.push_back(r);
      log(r);
#ifdef SWAPFFN_WITH_CUDA
      if (name == "fused") {  // the same step through a state pool (SPEC section 7)
        Row slots{name + kSlotsSuffix, batch, name};
        gpu->point(slots, [&](const cuda::TimedWindow& win) {
          return cuda::time_device_decode_slots(*engine, initial, a.tokens, a.warmup, a.repeats, 4, kSeed, win);
        });
        res.rows.push_back(slots);
        log(slots);
        if (!python_model.empty()) add_python_row(*gpu, a, python_model, fused.at(batch).describe(), batch, res);
      }
#endif
    }
  }
  res.flips = fp8_flip_rate(engines);
  return res;
}

double ms_of(const Results& res, const std::string& backend, int64_t batch) {
  for (const auto& r : res.rows)
    if (r.backend == backend && r.batch == batch) return r.ms;
  return 0.0;
}

// Prints the table (and the telemetry lines) and returns the rows as JSON.
nlohmann::json report(const Results& res, const Config& cfg) {
  nlohmann::json jrows = nlohmann::json::array();
  std::printf("\n%-16s %5s %12s %12s %9s %9s %11s %9s %7s %13s %9s\n", "backend", "B", "ms/step", "tok/s", "TF/s",
              "% floor", "vs unfused", "vs GEMMs", "spread", "matched floor", "% matched");
  bool spread_noted = false;
  std::vector<std::string> telemetry_lines, slot_lines;
  std::vector<std::string> fp8_lines;
  for (const auto& r : res.rows) {
    const bool anchor_row = is_anchor(r.backend);
    const double flops = anchor_row ? cfg.ffn_flops_per_token() : cfg.flops_per_token();
    const double tok_s = r.batch / (r.ms * 1e-3), tflops = flops * r.batch / (r.ms * 1e-3) / 1e12;
    const double pct = res.floor_tflops > 0 ? 100 * tflops / res.floor_tflops : 0;
    const double pct_matched = r.matched_floor_tflops > 0 ? 100 * tflops / r.matched_floor_tflops : 0;
    const double base = ms_of(res, "unfused", r.batch),
                 anchor = ms_of(res, r.precision == "fp8" ? kFp8Anchor : kAnchor, r.batch);
    const double twin = r.precision == "fp8" ? ms_of(res, bf16_twin(r.backend), r.batch) : 0;
    const double dense = r.dense.empty() ? 0 : ms_of(res, r.dense, r.batch);
    // The python row against the C++ slot step it calls.
    const double cpp_slots = r.backend == kPythonRow ? ms_of(res, r.dense + kSlotsSuffix, r.batch) : 0;
    const double speedup = base > 0 ? base / r.ms : 0, vs_anchor = anchor > 0 ? anchor / r.ms : 0;
    char vs[32] = "-", vs_gemms[32] = "-", pct_s[32] = "-", spread_s[32] = "-", matched_s[32] = "-",
         pct_matched_s[32] = "-";
    if (base > 0) std::snprintf(vs, sizeof(vs), "%.2fx", speedup);
    if (anchor > 0) std::snprintf(vs_gemms, sizeof(vs_gemms), "%.2fx", vs_anchor);
    if (res.floor_tflops > 0) std::snprintf(pct_s, sizeof(pct_s), "%.1f", pct);
    if (r.matched_floor_tflops > 0) {
      const bool noted = r.spread > kSpreadNote;
      spread_noted = spread_noted || noted;
      std::snprintf(spread_s, sizeof(spread_s), "%.1f%%%s", 100 * r.spread, noted ? "*" : "");
      std::snprintf(matched_s, sizeof(matched_s), "%.1f TF/s", r.matched_floor_tflops);
      std::snprintf(pct_matched_s, sizeof(pct_matched_s), "%.1f", pct_matched);
    }
    std::printf("%-16s %5lld %12.4f %12.1f %9.2f %9s %11s %9s %7s %13s %9s\n", r.backend.c_str(),
                static_cast<long long>(r.batch), r.ms, tok_s, tflops, pct_s, vs, vs_gemms, spread_s, matched_s,
                pct_matched_s);
    const double per_clock = pct_matched_per_clock(r, pct_matched);
    if (r.telemetry && r.matched_floor_telemetry) {
      char line[512];
      std::snprintf(line, sizeof(line), "%-16s %5lld  %-48s | %-48s | %.1f", r.backend.c_str(),
                    static_cast<long long>(r.batch), telemetry_text(*r.telemetry).c_str(),
                    telemetry_text(*r.matched_floor_telemetry).c_str(), per_clock);
      telemetry_lines.push_back(line);
    }
    nlohmann::json jrow = {{"backend", r.backend}, {"batch", r.batch}, {"ms_per_step", r.ms}, {"tok_per_s", tok_s},
                           {"tflops", tflops}, {"pct_of_floor", pct}, {"speedup_vs_unfused", speedup},
                           {"speedup_vs_gemms_alone", vs_anchor}, {"spread", r.spread},
                           {"matched_floor_tflops", r.matched_floor_tflops}, {"pct_of_matched_floor", pct_matched},
                           {"telemetry", telemetry_json(r.telemetry)},
                           {"matched_floor_telemetry", telemetry_json(r.matched_floor_telemetry)},
                           {"pct_of_matched_floor_per_clock", per_clock},
                           {"slot_step_over_dense", dense > 0 ? r.ms / dense : 0.0}, {"precision", r.precision},
                           {"fp8_over_bf16", twin > 0 ? twin / r.ms : 0.0}};
    if (r.backend == kPythonRow) {
      jrow["over_cpp_slot_step"] = cpp_slots > 0 ? r.ms / cpp_slots : 0.0;
      jrow["over_cpp_slot_step_same_process"] = r.same_process_cpp_ms > 0 ? r.ms / r.same_process_cpp_ms : 0.0;
    }
    jrows.push_back(jrow);
    if (dense > 0)
      slot_lines.push_back(r.backend + " B=" + std::to_string(r.batch) + ": " + fmt_ratio(r.ms / dense) +
                           (cpp_slots > 0 ? " (" + fmt_ratio(r.ms / cpp_slots) + " the C++ slot step" : "") +
                           (cpp_slots > 0 && r.same_process_cpp_ms > 0
                                ? ", " + fmt_ratio(r.ms / r.same_process_cpp_ms) + " in the same process"
                                : "") +
                           (cpp_slots > 0 ? ")" : ""));
    if (twin > 0) fp8_lines.push_back(r.backend + " B=" + std::to_string(r.batch) + ": " + fmt_ratio(twin / r.ms));
  }
  if (ms_of(res, kAnchor, res.rows.front().batch) > 0)
    std::printf("%s: cuBLAS's FFN GEMMs alone (x W1^T, x W3^T, u W2^T per FFN step, %lld GEMMs per token step, one "
                "CUDA graph); its TF/s count the FFN's FLOPs only. \"vs GEMMs\": its time over the row's\n",
                kAnchor, static_cast<long long>(3 * cfg.n_events * cfg.k_ffn));
  if (ms_of(res, kFp8Anchor, res.rows.front().batch) > 0)
    std::printf("%s: the same GEMMs in e4m3 with the fp8 recipe's block scales (cuBLASLt's block-scaled fp8 matmul); "
                "fp8 rows' \"vs GEMMs\" is against it\n",
                kFp8Anchor);
  if (ms_of(res, kFp8RowsAnchor, res.rows.front().batch) > 0)
    std::printf("%s, %s: the same e4m3 GEMMs with coarser scales than the recipe's (one per row of x and u and per "
                "output channel of W; one per tensor), promoted to fp32 as the recipe's: the headroom of each "
                "scaling (their \"vs GEMMs\": over %s)\n",
                kFp8RowsAnchor, kFp8TensorAnchor, kFp8Anchor);
  if (!fp8_lines.empty()) {
    std::printf("fp8 over bf16 (tok/s of each fp8 row over its bf16 twin's, same run):");
    for (const auto& l : fp8_lines) std::printf("  %s", l.c_str());
    std::printf("\n");
  }
  if (!slot_lines.empty()) {
    std::printf("slot steps (a pool of 4B slots, the batch in every fourth slot, addressed in place; %s: through "
                "the Python API from torch CUDA graphs) over the dense step:",
                kPythonRow);
    for (const auto& l : slot_lines) std::printf("  %s", l.c_str());
    std::printf("\n");
  }
  if (spread_noted)
    std::printf("* the timed runs differ by more than %.0f%%: the GPU's clock moved during the point\n", 100 * kSpreadNote);
  if (!telemetry_lines.empty()) {
    std::printf("\nGPU telemetry over each timed part (NVML every %g ms): SM clock median [min-max] MHz, mean power "
                "(windows of %g s or more), hottest reading, clock limits; \"per clock\": %% of the matched floor at "
                "equal SM clocks\n",
                kTelemetryMs, kPowerMinSeconds);
    std::printf("%-16s %5s  %-48s | %-48s | %s\n", "backend", "B", "point", "matched floor", "per clock");
    for (const auto& l : telemetry_lines) std::printf("%s\n", l.c_str());
  }
  return jrows;
}

void write_json(const std::string& path, const BenchArgs& a, const Config& cfg, const GpuInfo& gpu, const Results& res,
                const nlohmann::json& rows) {
  nlohmann::json j;
  j["device"] = gpu.present ? gpu.name : "none";
  j["driver"] = gpu.present ? std::to_string(gpu.driver_version) : "";
  j["runtime"] = gpu.present ? std::to_string(gpu.runtime_version) : "";
  j["commit"] = source_commit();
  j["build_commit"] = SWAPFFN_GIT_COMMIT;
  j["date"] = utc_now();
  j["config"] = cfg.to_json();
  j["tokens"] = a.tokens;
  j["repeats"] = a.repeats;
  j["warmup"] = a.warmup;
  j["flops_per_token"] = cfg.flops_per_token();
  j["peak_tflops"] = res.floor_tflops;
  j["cooldown_s"] = a.cooldown_s;
  j["telemetry_period_ms"] = kTelemetryMs;
  j["floor_telemetry"] = telemetry_json(res.floor_telemetry);
  if (!res.anchor_algorithms.empty())
    j["gemms_alone"] = {{"row", kAnchor},
                        {"gemms_per_step", 3 * cfg.n_events * cfg.k_ffn},
                        {"algorithms", res.anchor_algorithms}};
  if (res.fp8_anchor_algorithms.contains(kFp8Anchor))
    j["fp8_gemms_alone"] = {{"row", kFp8Anchor},
                            {"gemms_per_step", 3 * cfg.n_events * cfg.k_ffn},
                            {"algorithms", res.fp8_anchor_algorithms[kFp8Anchor]}};
  for (const char* row : {kFp8RowsAnchor, kFp8TensorAnchor})
    if (res.fp8_anchor_algorithms.contains(row))
      j["fp8_headroom"][row] = {{"gemms_per_step", 3 * cfg.n_events * cfg.k_ffn},
                                {"algorithms", res.fp8_anchor_algorithms[row]}};
  if (!res.telemetry_note.empty()) j["telemetry_unavailable"] = res.telemetry_note;
  if (!res.power_note.empty()) j["power_unavailable"] = res.power_note;
  if (!res.python_note.empty()) j["python_unavailable"] = res.python_note;
  if (res.flips) {
    nlohmann::json per_token = nlohmann::json::array();
    for (int64_t t = 0; t < res.flips->tokens; ++t) per_token.push_back(res.flips->rate(t));
    j["flip_rate"] = {{"engine", res.flips->engine}, {"baseline", res.flips->baseline}, {"batch", res.flips->batch},
                      {"tokens", res.flips->tokens}, {"per_token", per_token}, {"overall", res.flips->overall()}};
  }
  j["rows"] = rows;
  write_file_atomically(path, j.dump(2) + "\n");
  std::printf("wrote %s\n", path.c_str());
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
  std::printf("config %s: %.4g GFLOP per token per sequence; %d tokens x %d repeats (+%d warm-up) per point\n",
              a.model.empty() ? a.preset.c_str() : a.model.c_str(), w.cfg.flops_per_token() * 1e-9, a.tokens,
              a.repeats, a.warmup);
  const PythonModel python(a, w, backends);
  Results res = measure(a, w, backends, python.path);
  if (res.python_note.empty()) res.python_note = python.note;
  if (res.floor_tflops > 0)
    std::printf("floor: bf16 GEMM %dx%dx%d at %.1f TFLOP/s -> %.4f ms per token step per sequence (at the start)\n",
                kFloorN, kFloorN, kFloorN, res.floor_tflops, w.cfg.flops_per_token() / (res.floor_tflops * 1e12) * 1e3);
  if (res.floor_telemetry) std::printf("floor GEMM telemetry: %s\n", telemetry_text(*res.floor_telemetry).c_str());
  if (!res.telemetry_note.empty()) std::printf("GPU telemetry: unavailable: %s\n", res.telemetry_note.c_str());
  if (!res.power_note.empty()) std::printf("GPU telemetry: no power readings: %s\n", res.power_note.c_str());
  const nlohmann::json rows = report(res, w.cfg);
  if (res.flips)
    std::printf("flip rate of %s vs %s (bf16), per token over %lld tokens at B=%lld: %s\n", res.flips->engine.c_str(),
                res.flips->baseline.c_str(), static_cast<long long>(res.flips->tokens),
                static_cast<long long>(res.flips->batch), res.flips->per_token().c_str());
  if (!a.json.empty()) write_json(a.json, a, w.cfg, gpu, res, rows);
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
  cmd->add_option("--batches", a->batches, "batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "token steps per timed run")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timed runs (the median is reported)")->capture_default_str();
  cmd->add_option("--cooldown", a->cooldown_s, "seconds idle before each GPU point and before its matched floor")
      ->capture_default_str();
  cmd->add_option("--json", a->json, "also write the results as JSON to this file");
  cmd->add_flag("--python", a->python,
                "also time the fused slot step through the Python API from torch CUDA graphs (python3 -m "
                "swapffn.bench_row; $SWAPFFN_PYTHON names another interpreter)");
  cmd->add_option("--tune", a->fused.tune_file,
                  "fused backend: tuning cache written by `swapffn tune` (default: $SWAPFFN_TUNE_FILE)");
  cmd->add_flag("--fp8-headroom", a->fp8_headroom,
                "also time the fp8 GEMMs with per-row/channel and per-tensor scales (the headroom of coarser scalings)");
  cmd->add_option("--fp8-kernels", a->fp8_kernels, "fused-fp8: pinned kernel choices, e.g. 'fp8up=sm90,groups=2'");
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace swapffn::cli
