// swapffn bench: token-step time of each backend for several batch sizes, against the floor set by
// this GPU's dense bf16 GEMM rate measured in the same run (SPEC section 6).
// A GPU's clock follows its power and temperature limits: a lent H100 was seen at its 700 W cap
// within a second of sustained load and at ~400 MHz (thermal slowdown, 87 C) after a few seconds.
// So the points run batch by batch, every backend at one batch size back to back (the ratio to
// unfused compares runs under about the same conditions); each GPU point starts after --cooldown
// seconds idle; each row reports how much its timed runs differed (a clock that moved during the
// point shows there). "% floor" is SPEC section 6's: against the dense bf16 rate measured once, at
// the start. Beside it each GPU point gets a matched floor: the GEMM run after the same pause for
// as long as the point ran (the same load history), which shows how much of a point's distance to
// the floor is the machine's sustained clock rather than the kernels. NVML telemetry (SM clock,
// temperature, clock limits, mean power) sampled over each point and each floor GEMM shows the
// clock itself, and the point's rate per clock against its floor's. At every GPU batch size the
// issue's anchor, cuBLAS's FFN GEMMs alone, is timed first the same way, and every row is set against
// it ("vs GEMMs"): the fused step must beat it end to end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "swapffn_commit.hpp"
#include "swapffn/device.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"
#include "bench/telemetry.hpp"
#include "swapffn/weights.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "bench/bench_runner.hpp"
#include "bench/nvml_telemetry.hpp"
#endif

namespace swapffn::cli {

namespace {

struct BenchArgs {
  std::string model, preset = "default", json;
  std::vector<std::string> backends;
  std::vector<std::string> fused_configs;  // extra rows of the fused backend with these kernel configs
  std::vector<std::string> leave_out;      // extra rows of the fused backend with these kernels left out
  std::string tune_file;                   // the fused backend's tuning cache
  std::vector<int64_t> batches{1, 4, 16, 64};
  int tokens = 16, warmup = 2, repeats = 5, peak_n = 8192;
  double cooldown_s = 3;
  double telemetry_ms = 5;  // NVML sampling period; 0: no telemetry
  uint64_t seed = 1;
  bool breakdown = false, eager = false;
  bool gemms_alone = true;  // time the anchor (cuBLAS's FFN GEMMs alone) at every GPU batch size
};

// The row of the anchor: cuBLAS's FFN GEMMs alone (cuda::CublasFfnGemms).
constexpr const char* kGemmsAlone = "cublas-ffn-gemms";

struct Row {
  std::string backend;
  int64_t batch = 0;
  double ms = 0;
  double matched_floor_tflops = 0;  // the floor GEMM under this point's load history (GPU points)
  double spread = 0;        // (slowest - fastest) / median of the timed runs (GPU points)
  std::optional<TelemetrySummary> telemetry, matched_floor_telemetry;  // GPU points, when NVML is usable
};

// The board's power readings refresh every few tens of milliseconds and trail the load, so a window
// shorter than this (the B <= 4 points of the default model) gets no power figure rather than a few
// trailing readings. The clock reading has no such lag.
constexpr double kPowerMinSeconds = 0.5;
bool power_known(const TelemetrySummary& t) { return t.power_w_mean > 0 && t.seconds >= kPowerMinSeconds; }

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

// FLOPs per token of a row: the anchor runs the FFN's GEMMs only, so its rate counts only theirs.
double row_flops_per_token(const Config& cfg, const std::string& backend) {
  return backend == kGemmsAlone ? cfg.ffn_flops_per_token() : cfg.flops_per_token();
}

// Rows whose timed runs differ by more than this are marked: the clock moved during the point.
constexpr double kSpreadNote = 0.05;

bool is_gpu_backend(const std::string& b) { return b != "reference"; }

// Host backends (the reference): wall time of decode() over `tokens` steps, median of repeats.
double time_host_decode(Engine& e, const State& initial, const BenchArgs& a) {
  State s = initial;
  const int64_t n = static_cast<int64_t>(a.tokens) * s.batch * e.config().d_model;
  std::vector<float> delta(static_cast<size_t>(n));
  std::vector<double> ms;
  for (int r = 0; r < a.warmup + a.repeats; ++r) {
    const std::vector<float> x = decode_inputs(mix_seed(a.seed, static_cast<uint64_t>(r)), a.tokens, s.batch,
                                               e.config().d_model);
    const auto t0 = std::chrono::steady_clock::now();
    e.decode(x.data(), delta.data(), a.tokens, s);
    const auto t1 = std::chrono::steady_clock::now();
    if (r >= a.warmup) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / a.tokens);
  }
  std::sort(ms.begin(), ms.end());
  return ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
}

// The source commit to report: SWAPFFN_COMMIT when set (a binary carried to another machine is
// labelled with the commit it was built for), else the commit of the build (swapffn_commit.hpp).
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

// A point's rate per SM clock against its matched floor's (0 without both clocks): how much of the
// distance to the matched floor remains at equal clocks.
double pct_matched_per_clock(const Row& r, double pct_matched) {
  if (!r.telemetry || !r.matched_floor_telemetry || r.telemetry->sm_clock_mhz_median <= 0) return 0;
  return pct_matched * r.matched_floor_telemetry->sm_clock_mhz_median / r.telemetry->sm_clock_mhz_median;
}

std::string fmt_telemetry_line(const Row& r, double per_clock) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-16s %5lld  %-48s | %-48s | %.1f", r.backend.c_str(), static_cast<long long>(r.batch),
                telemetry_text(*r.telemetry).c_str(), telemetry_text(*r.matched_floor_telemetry).c_str(), per_clock);
  return buf;
}

void run_bench(const BenchArgs& a) {
  SWAPFFN_REQUIRE(a.tokens > 0 && a.repeats > 0 && a.warmup >= 0, "--tokens and --repeats must be > 0");
  SWAPFFN_REQUIRE(a.cooldown_s >= 0 && a.cooldown_s <= 600, "--cooldown must be 0 to 600 seconds");
  SWAPFFN_REQUIRE(!a.batches.empty(), "--batches is empty");
  for (int64_t b : a.batches) SWAPFFN_REQUIRE(b > 0, "batch sizes must be > 0 (got " + std::to_string(b) + ")");
  const Weights w = a.model.empty() ? Weights::random(Config::preset(a.preset), a.seed) : Weights::load(a.model);
  const Config& cfg = w.cfg;
  const bool tiny = a.model.empty() && a.preset == "tiny";

  // Backends: the requested ones, or all compiled in. The reference runs only on tiny.
  const bool explicit_list = !a.backends.empty();
  std::vector<std::string> backends = explicit_list ? a.backends : backend_names();
  std::vector<std::string> skipped;
  std::vector<std::string> run_list;
  for (const auto& b : backends) {
    if (b == "reference" && !tiny) {
      SWAPFFN_REQUIRE(!explicit_list, "backend 'reference' is benchmarked only with --config tiny");
      skipped.push_back("reference (only on --config tiny)");
      continue;
    }
    run_list.push_back(b);
  }
  const bool wants_gpu = std::any_of(run_list.begin(), run_list.end(), is_gpu_backend);
  const GpuInfo gpu = query_gpu();
  if (wants_gpu) {
#ifndef SWAPFFN_WITH_CUDA
    SWAPFFN_FAIL("GPU backends need a CUDA build (this build has no CUDA); only '--backends reference "
                 "--config tiny' runs without one");
#endif
    SWAPFFN_REQUIRE(gpu.present, "no usable GPU (" + gpu.why_absent +
                                     "); only '--backends reference --config tiny' runs without one");
  }
  SWAPFFN_REQUIRE(!run_list.empty(), "nothing to benchmark (the reference runs only on --config tiny)");
  SWAPFFN_REQUIRE(a.tune_file.empty() || std::find(run_list.begin(), run_list.end(), "fused") != run_list.end(),
                  "--tune applies to the fused backend, which this bench does not run");

  SWAPFFN_REQUIRE(a.telemetry_ms >= 0 && a.telemetry_ms <= 1000, "--telemetry-ms must be 0 (off) to 1000");
  double peak = 0;
  std::optional<TelemetrySummary> peak_telemetry;
  std::string telemetry_note;  // why there is no telemetry (empty when there is)
  std::string power_note;      // why the telemetry has no power readings (empty when it has)
#ifdef SWAPFFN_WITH_CUDA
  // NVML is optional to the bench: without it the times stand, and the output says why it is absent.
  std::unique_ptr<cuda::NvmlSampler> sampler;
  if (gpu.present && a.telemetry_ms > 0) {
    try {
      sampler = std::make_unique<cuda::NvmlSampler>(std::chrono::microseconds(static_cast<int64_t>(a.telemetry_ms * 1000)));
    } catch (const Error& e) {
      telemetry_note = e.what();
    }
  } else if (gpu.present) {
    telemetry_note = "off (--telemetry-ms 0)";
  }
  if (sampler && !sampler->has_power()) power_note = sampler->why_no_power();
  // A telemetry window over a measurement's timed part, into `out` (none without a sampler).
  const auto window = [&](std::optional<TelemetrySummary>& out) {
    if (!sampler) return cuda::TimedWindow{};
    return cuda::TimedWindow{[&] { sampler->start(); }, [&] { out = sampler->stop(); }};
  };
  if (gpu.present) peak = cuda::measure_bf16_gemm_tflops(a.peak_n, 3, 10, 0, window(peak_telemetry));
#endif
  std::printf("swapffn bench: %s, commit %s (binary built at %s), %s\n",
              gpu.present ? gpu.name.c_str() : "no GPU", source_commit().c_str(), SWAPFFN_GIT_COMMIT,
              utc_now().c_str());
  std::printf("config %s: %.4g GFLOP per token per sequence; %d tokens x %d repeats (+%d warm-up) per point\n",
              a.model.empty() ? a.preset.c_str() : a.model.c_str(), cfg.flops_per_token() * 1e-9, a.tokens,
              a.repeats, a.warmup);
  if (peak > 0)
    std::printf("floor: bf16 GEMM %dx%dx%d measured at %.1f TFLOP/s -> %.4f ms per token step per sequence (at the "
                "start)\n",
                a.peak_n, a.peak_n, a.peak_n, peak, cfg.flops_per_token() / (peak * 1e12) * 1e3);
  if (peak_telemetry) std::printf("floor GEMM telemetry: %s\n", telemetry_text(*peak_telemetry).c_str());
  if (!telemetry_note.empty()) std::printf("GPU telemetry: unavailable: %s\n", telemetry_note.c_str());
  if (!power_note.empty()) std::printf("GPU telemetry: no power readings: %s\n", power_note.c_str());
  for (const auto& s : skipped) std::printf("skipped: %s\n", s.c_str());

  // Every variant's engine first, then the points batch by batch (see the top of this file).
  struct Variant {
    std::string label, backend;
    bool graph;
    std::string kernel_config;
    std::unique_ptr<Engine> engine;
    std::string leave_out;  // EngineOptions::leave_out (timing diagnostics)
  };
  std::vector<Variant> variants;
  for (const auto& b : run_list) {
    std::vector<Variant> of_b;
    of_b.push_back({b, b, true, "", nullptr, ""});
    if (a.eager && is_gpu_backend(b)) of_b.push_back({b + "(eager)", b, false, "", nullptr, ""});
    if (b == "fused") {
      for (const auto& kc : a.fused_configs) of_b.push_back({b + "[" + kc + "]", b, true, kc, nullptr, ""});
      for (const auto& lo : a.leave_out) of_b.push_back({b + "[leave_out=" + lo + "]", b, true, "", nullptr, lo});
    }
    for (auto& v : of_b) {
      EngineOptions eo;
      eo.graph = v.graph;
      eo.kernel_config = v.kernel_config;
      eo.leave_out = v.leave_out;
      if (b == "fused") eo.tune_file = a.tune_file;
      try {
        v.engine = make_engine(b, w, eo);
      } catch (const Error& e) {
        if (explicit_list || !eo.tune_file.empty()) throw;  // a named backend or cache must run
        std::printf("skipped: %s (%s)\n", v.label.c_str(), e.what());
        break;
      }
      variants.push_back(std::move(v));
    }
  }

  std::vector<Row> rows;
  std::vector<std::string> breakdown_lines;
  nlohmann::json anchor_algorithms = nlohmann::json::object();  // cuBLASLt's picks for the anchor, per batch
  const bool time_anchor = gpu.present && a.gemms_alone && std::any_of(variants.begin(), variants.end(), [](const Variant& v) {
                             return is_gpu_backend(v.backend);
                           });
  for (int64_t batch : a.batches) {
    const State initial = State::random(cfg, batch, a.seed);
#ifdef SWAPFFN_WITH_CUDA
    // A GPU point: after the cool-down, `timed` measures it over a telemetry window; then the matched
    // floor, after the same pause, for as long as the point ran.
    const auto cool = [&] { std::this_thread::sleep_for(std::chrono::duration<double>(a.cooldown_s)); };
    const auto gpu_point = [&](Row& r, const std::function<cuda::DecodeTiming(const cuda::TimedWindow&)>& timed) {
      cool();
      const auto t0 = std::chrono::steady_clock::now();
      const cuda::DecodeTiming t = timed(window(r.telemetry));
      const double point_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      cool();
      r.matched_floor_tflops = cuda::measure_bf16_gemm_tflops(a.peak_n, 3, 10, point_ms, window(r.matched_floor_telemetry));
      r.ms = t.median_ms_per_step;
      r.spread = (t.max_ms_per_step - t.min_ms_per_step) / t.median_ms_per_step;
    };
    if (time_anchor) {
      Row r;
      r.backend = kGemmsAlone;
      r.batch = batch;
      std::string algorithms;
      gpu_point(r, [&](const cuda::TimedWindow& win) {
        return cuda::time_cublas_ffn_gemms(w, batch, a.tokens, a.warmup, a.repeats, a.seed, win, &algorithms);
      });
      anchor_algorithms[std::to_string(batch)] = algorithms;
      rows.push_back(r);
      std::fprintf(stderr, "  %s B=%lld: %.4f ms/step\n", kGemmsAlone, static_cast<long long>(batch), r.ms);
    }
#endif
    for (auto& v : variants) {
      Row r;
      r.backend = v.label;
      r.batch = batch;
      if (is_gpu_backend(v.backend)) {
#ifdef SWAPFFN_WITH_CUDA
        gpu_point(r, [&](const cuda::TimedWindow& win) {
          return cuda::time_device_decode(*v.engine, initial, a.tokens, a.warmup, a.repeats, 4, a.seed, win);
        });
        if (a.breakdown && v.graph) {
          std::optional<TelemetrySummary> bt;
          const cuda::PhaseBreakdown pb = cuda::time_device_phases(*v.engine, initial, 3, a.seed, window(bt));
          double total = 0;
          for (double x : pb.ms_per_step) total += x;
          std::ostringstream line;
          char buf[96];
          std::snprintf(buf, sizeof(buf), "%-10s B=%-4lld eager %.3f ms:", v.label.c_str(),
                        static_cast<long long>(batch), total);
          line << buf;
          for (size_t p = 0; p < pb.names.size(); ++p) {
            std::snprintf(buf, sizeof(buf), "  %s %.3f (%.0f%%)", pb.names[p], pb.ms_per_step[p],
                          total > 0 ? 100 * pb.ms_per_step[p] / total : 0.0);
            line << buf;
          }
          // The FFN GEMM phase's rate, to set against the floors at the clock it ran at.
          for (size_t p = 0; p < pb.names.size(); ++p)
            if (std::string(pb.names[p]) == "FFN GEMMs" && pb.ms_per_step[p] > 0) {
              std::snprintf(buf, sizeof(buf), "  [FFN GEMMs %.0f TF/s]",
                            cfg.ffn_flops_per_token() * double(batch) / (pb.ms_per_step[p] * 1e-3) / 1e12);
              line << buf;
            }
          if (bt) {
            std::snprintf(buf, sizeof(buf), "  SM clock %.0f MHz", bt->sm_clock_mhz_median);
            line << buf;
          }
          breakdown_lines.push_back(line.str());
        }
#endif
      } else {
        r.ms = time_host_decode(*v.engine, initial, a);
      }
      rows.push_back(r);
      std::fprintf(stderr, "  %s B=%lld: %.4f ms/step\n", v.label.c_str(), static_cast<long long>(batch), r.ms);
    }
  }

  const auto ms_of = [&](const char* backend, int64_t batch) {
    for (const auto& r : rows)
      if (r.backend == backend && r.batch == batch) return r.ms;
    return 0.0;
  };
  nlohmann::json jrows = nlohmann::json::array();
  std::printf("\n%-16s %5s %12s %12s %9s %9s %11s %9s %7s %13s %9s\n", "backend", "B", "ms/step", "tok/s", "TF/s",
              "% floor", "vs unfused", "vs GEMMs", "spread", "matched floor", "% matched");
  bool spread_noted = false;
  std::vector<std::string> telemetry_lines;
  for (const auto& r : rows) {
    const double tok_s = r.batch / (r.ms * 1e-3);
    const double tflops = row_flops_per_token(cfg, r.backend) * r.batch / (r.ms * 1e-3) / 1e12;
    const double pct = peak > 0 ? 100 * tflops / peak : 0;
    const double pct_matched = r.matched_floor_tflops > 0 ? 100 * tflops / r.matched_floor_tflops : 0;
    const double base = ms_of("unfused", r.batch), anchor = ms_of(kGemmsAlone, r.batch);
    const double speedup = base > 0 ? base / r.ms : 0, vs_anchor = anchor > 0 ? anchor / r.ms : 0;
    char vs[32] = "-", vs_gemms[32] = "-";
    if (base > 0) std::snprintf(vs, sizeof(vs), "%.2fx", speedup);
    if (anchor > 0) std::snprintf(vs_gemms, sizeof(vs_gemms), "%.2fx", vs_anchor);
    char pct_s[32] = "-", spread_s[32] = "-", matched_s[32] = "-", pct_matched_s[32] = "-";
    if (peak > 0) std::snprintf(pct_s, sizeof(pct_s), "%.1f", pct);
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
    if (r.telemetry && r.matched_floor_telemetry)
      telemetry_lines.push_back(fmt_telemetry_line(r, pct_matched_per_clock(r, pct_matched)));
    jrows.push_back({{"backend", r.backend}, {"batch", r.batch}, {"ms_per_step", r.ms}, {"tok_per_s", tok_s},
                     {"tflops", tflops}, {"pct_of_floor", pct}, {"speedup_vs_unfused", speedup},
                     {"speedup_vs_gemms_alone", vs_anchor}, {"spread", r.spread},
                     {"matched_floor_tflops", r.matched_floor_tflops}, {"pct_of_matched_floor", pct_matched},
                     {"telemetry", telemetry_json(r.telemetry)},
                     {"matched_floor_telemetry", telemetry_json(r.matched_floor_telemetry)},
                     {"pct_of_matched_floor_per_clock", pct_matched_per_clock(r, pct_matched)}});
  }
  if (time_anchor)
    std::printf("%s: the issue's anchor, cuBLAS's FFN GEMMs alone, timed here: per FFN step x W1^T, x W3^T and u W2^T "
                "(bf16 out, cuBLASLt's own pick; %lld GEMMs per token step) in one CUDA graph, nothing else; its TF/s and "
                "%% floor count the FFN's FLOPs only. \"vs GEMMs\": its time over the row's (above 1.00x the row beats "
                "it)\n",
                kGemmsAlone, static_cast<long long>(3 * cfg.n_events * cfg.k_ffn));
  if (spread_noted)
    std::printf("* the timed runs of this point differ by more than %.0f%% (slowest against fastest): the GPU's "
                "clock moved during it (power or thermal limit, or another tenant)\n",
                100 * kSpreadNote);
  if (!telemetry_lines.empty()) {
    std::printf("\nGPU telemetry over each measurement's timed part (NVML, a sample every %g ms): SM clock median "
                "[min-max] MHz, mean power of the board's readings (windows of %g s or more), hottest reading, clock "
                "limits by share of the samples; \"per clock\": %% of the matched floor at equal SM clocks, i.e. "
                "%% matched x floor MHz / point MHz\n",
                a.telemetry_ms, kPowerMinSeconds);
    std::printf("%-16s %5s  %-48s | %-48s | %s\n", "backend", "B", "point", "matched floor", "per clock");
    for (const auto& l : telemetry_lines) std::printf("%s\n", l.c_str());
  }
  if (!a.leave_out.empty())
    std::printf("\nleave_out rows: diagnostics. The fused step with those kernels left out of its graph (outputs wrong,"
                " and left-out kernels change the data the rest sees; what they would have written, h and the GEMMs'"
                " operands, starts random, never zeros); its time less the fused row's is what they cost inside the"
                " step, where no profiler's timeline is at hand\n");
  if (!breakdown_lines.empty()) {
    std::printf("\nbreakdown (eager steps, an event around each phase; graph replays skip the launch gaps; the "
                "fused backend's row groups run one after another here, side by side in the graph):\n");
    for (const auto& l : breakdown_lines) std::printf("%s\n", l.c_str());
  }
  if (!a.json.empty()) {
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
    j["peak_tflops"] = peak;
    j["cooldown_s"] = a.cooldown_s;
    j["telemetry_period_ms"] = a.telemetry_ms;
    j["floor_telemetry"] = telemetry_json(peak_telemetry);
    if (time_anchor)
      j["gemms_alone"] = {{"row", kGemmsAlone},
                          {"gemms_per_step", 3 * cfg.n_events * cfg.k_ffn},
                          {"algorithms", anchor_algorithms}};
    if (!telemetry_note.empty()) j["telemetry_unavailable"] = telemetry_note;
    if (!power_note.empty()) j["power_unavailable"] = power_note;
    j["rows"] = jrows;
    std::ofstream f(a.json);
    SWAPFFN_REQUIRE(f.good(), "cannot write " + a.json);
    f << j.dump(2) << "\n";
    SWAPFFN_REQUIRE(f.good(), "failed writing " + a.json);
    std::printf("wrote %s\n", a.json.c_str());
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "time token steps per backend and batch size against the GEMM floor");
  cmd->add_option("--model", a->model, "model file (default: random parameters of --config)");
  cmd->add_option("--config", a->preset, "config preset when no --model: default or tiny")->capture_default_str();
  cmd->add_option("--backends", a->backends, "backends, comma-separated (default: all built; reference on tiny)")
      ->delimiter(',');
  cmd->add_option("--batches", a->batches, "batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "token steps per timed run")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed runs first")->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timed runs (the median is reported)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of parameters, state and inputs")->capture_default_str();
  cmd->add_option("--peak-n", a->peak_n, "size of the square GEMM that sets the floor")->capture_default_str();
  cmd->add_option("--cooldown", a->cooldown_s,
                  "seconds idle before each GPU point and before its floor GEMM (the clock follows the temperature)")
      ->capture_default_str();
  cmd->add_option("--telemetry-ms", a->telemetry_ms,
                  "GPU points: NVML sampling period of the SM clock, temperature, power and clock limits (0: off)")
      ->capture_default_str();
  cmd->add_option("--json", a->json, "also write the results as JSON to this file");
  cmd->add_flag("--breakdown", a->breakdown, "time per phase (router+swap, FFN GEMMs, elementwise, collapse)");
  cmd->add_flag("--eager", a->eager, "GPU backends: also time without CUDA graphs");
  cmd->add_flag("--gemms-alone,!--no-gemms-alone", a->gemms_alone,
                "time cuBLAS's FFN GEMMs alone (the issue's anchor) at every GPU batch size, and each row against it "
                "(default: on)");
  cmd->add_option("--tune", a->tune_file,
                  "the fused backend's tuning cache, written by `swapffn tune` (default: $SWAPFFN_TUNE_FILE, else the "
                  "built-in choices)");
  cmd->add_option("--fused-configs", a->fused_configs,
                  "also time the fused backend with each of these kernel configs (';'-separated, e.g. "
                  "'up=bn256_st4_sk1_mc1_p;down=cublas')")
      ->delimiter(';');
  cmd->add_option("--leave-out", a->leave_out,
                  "diagnostics: also time the fused step with kernels left out, one row per list (';'-separated lists "
                  "of film, router, dual, down, rmsnorm, collapse joined by '+', e.g. 'router;rmsnorm+router'); the "
                  "outputs are then wrong, the time difference is what those kernels cost inside the step")
      ->delimiter(';');
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace swapffn::cli
