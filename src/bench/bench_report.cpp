#include "bench/bench_report.hpp"

#include <cstdarg>
#include <cstdio>

namespace swapffn::bench {
namespace {

bool power_known(const TelemetrySummary& t) { return t.power_w_mean > 0 && t.seconds >= kPowerMinSeconds; }

// printf onto the end of out.
[[gnu::format(printf, 2, 3)]] void append(std::string& out, const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  out += buf;
}

std::string fmt_ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3fx", x);
  return buf;
}

int64_t gemms_per_step(const Config& cfg) { return 3 * cfg.n_events * cfg.k_ffn; }

bool ran(const BenchResults& res, const char* row) {
  return !res.rows.empty() && res.ms_of(row, res.rows.front().batch) > 0;
}

}  // namespace

double BenchResults::ms_of(const std::string& name, int64_t batch) const {
  for (const auto& r : rows)
    if (r.name == name && r.batch == batch) return r.ms;
  return 0.0;
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

std::string telemetry_text(const TelemetrySummary& t) {
  char power[16] = "   -";
  if (power_known(t)) std::snprintf(power, sizeof(power), "%4.0f", t.power_w_mean);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%4.0f [%4.0f-%4.0f]  %s W  %3.0f C  ", t.sm_clock_mhz_median, t.sm_clock_mhz_min,
                t.sm_clock_mhz_max, power, t.temperature_c_max);
  return buf + t.limits_text();
}

RowFigures figures(const BenchResults& res, const BenchRow& r, const Config& cfg) {
  RowFigures f;
  if (r.ms <= 0) return f;
  const double flops = r.gemms_alone ? cfg.ffn_flops_per_token() : cfg.flops_per_token();
  f.tok_s = r.batch / (r.ms * 1e-3);
  f.tflops = flops * r.batch / (r.ms * 1e-3) / 1e12;
  if (res.floor_tflops > 0) f.pct_floor = 100 * f.tflops / res.floor_tflops;
  if (r.matched_floor_tflops > 0) f.pct_matched = 100 * f.tflops / r.matched_floor_tflops;
  // The rate per SM clock against the matched floor's.
  if (r.telemetry && r.matched_floor_telemetry && r.telemetry->sm_clock_mhz_median > 0)
    f.pct_matched_per_clock =
        f.pct_matched * r.matched_floor_telemetry->sm_clock_mhz_median / r.telemetry->sm_clock_mhz_median;
  const auto over = [&](const std::string& other) {
    const double ms = other.empty() ? 0 : res.ms_of(other, r.batch);
    return ms > 0 ? ms / r.ms : 0.0;
  };
  const auto under = [&](const std::string& other) {
    const double ms = other.empty() ? 0 : res.ms_of(other, r.batch);
    return ms > 0 ? r.ms / ms : 0.0;
  };
  f.vs_unfused = over("unfused");
  f.vs_gemms = over(r.vs_gemms);
  f.fp8_over_bf16 = over(r.bf16_twin);
  f.slot_over_dense = under(r.dense);
  f.over_cpp_slots = under(r.cpp_slots);
  if (r.same_process_cpp_ms > 0) f.over_cpp_same_process = r.ms / r.same_process_cpp_ms;
  return f;
}

std::string report_text(const BenchResults& res, const Config& cfg) {
  std::string out;
  append(out, "\n%-16s %5s %12s %12s %9s %9s %11s %9s %7s %13s %9s\n", "backend", "B", "ms/step", "tok/s", "TF/s",
         "% floor", "vs unfused", "vs GEMMs", "spread", "matched floor", "% matched");
  bool spread_noted = false;
  std::vector<std::string> telemetry_lines, slot_lines, fp8_lines;
  for (const auto& r : res.rows) {
    const RowFigures f = figures(res, r, cfg);
    char vs[32] = "-", vs_gemms[32] = "-", pct_s[32] = "-", spread_s[32] = "-", matched_s[32] = "-",
         pct_matched_s[32] = "-";
    if (f.vs_unfused > 0) std::snprintf(vs, sizeof(vs), "%.2fx", f.vs_unfused);
    if (f.vs_gemms > 0) std::snprintf(vs_gemms, sizeof(vs_gemms), "%.2fx", f.vs_gemms);
    if (res.floor_tflops > 0) std::snprintf(pct_s, sizeof(pct_s), "%.1f", f.pct_floor);
    if (r.matched_floor_tflops > 0) {
      const bool noted = r.spread > kSpreadNote;
      spread_noted = spread_noted || noted;
      std::snprintf(spread_s, sizeof(spread_s), "%.1f%%%s", 100 * r.spread, noted ? "*" : "");
      std::snprintf(matched_s, sizeof(matched_s), "%.1f TF/s", r.matched_floor_tflops);
      std::snprintf(pct_matched_s, sizeof(pct_matched_s), "%.1f", f.pct_matched);
    }
    append(out, "%-16s %5lld %12.4f %12.1f %9.2f %9s %11s %9s %7s %13s %9s\n", r.name.c_str(),
           static_cast<long long>(r.batch), r.ms, f.tok_s, f.tflops, pct_s, vs, vs_gemms, spread_s, matched_s,
           pct_matched_s);
    if (r.telemetry && r.matched_floor_telemetry) {
      char line[512];
      std::snprintf(line, sizeof(line), "%-16s %5lld  %-48s | %-48s | %.1f", r.name.c_str(),
                    static_cast<long long>(r.batch), telemetry_text(*r.telemetry).c_str(),
                    telemetry_text(*r.matched_floor_telemetry).c_str(), f.pct_matched_per_clock);
      telemetry_lines.push_back(line);
    }
    const std::string at = r.name + " B=" + std::to_string(r.batch) + ": ";
    if (f.slot_over_dense > 0)
      slot_lines.push_back(at + fmt_ratio(f.slot_over_dense) +
                           (f.over_cpp_slots > 0 ? " (" + fmt_ratio(f.over_cpp_slots) + " the C++ slot step" : "") +
                           (f.over_cpp_slots > 0 && f.over_cpp_same_process > 0
                                ? ", " + fmt_ratio(f.over_cpp_same_process) + " in the same process"
                                : "") +
                           (f.over_cpp_slots > 0 ? ")" : ""));
    if (f.fp8_over_bf16 > 0) fp8_lines.push_back(at + fmt_ratio(f.fp8_over_bf16));
  }
  if (ran(res, kAnchors[0].name))
    append(out,
           "%s: cuBLAS's FFN GEMMs alone (x W1^T, x W3^T, u W2^T per FFN step, %lld GEMMs per token step, one "
           "CUDA graph); its TF/s count the FFN's FLOPs only. \"vs GEMMs\": its time over the row's\n",
           kAnchors[0].name, static_cast<long long>(gemms_per_step(cfg)));
  if (ran(res, kAnchors[1].name))
    append(out,
           "%s: the same GEMMs in e4m3 with the fp8 recipe's block scales (cuBLASLt's block-scaled fp8 matmul); "
           "fp8 rows' \"vs GEMMs\" is against it\n",
           kAnchors[1].name);
  if (ran(res, kAnchors[2].name))
    append(out,
           "%s, %s: the same e4m3 GEMMs with coarser scales than the recipe's (one per row of x and u and per "
           "output channel of W; one per tensor), promoted to fp32 as the recipe's: the headroom of each "
           "scaling (their \"vs GEMMs\": over %s)\n",
           kAnchors[2].name, kAnchors[3].name, kAnchors[1].name);
  if (!fp8_lines.empty()) {
    out += "fp8 over bf16 (tok/s of each fp8 row over its bf16 twin's, same run):";
    for (const auto& l : fp8_lines) out += "  " + l;
    out += "\n";
  }
  if (!slot_lines.empty()) {
    append(out,
           "slot steps (a pool of 4B slots, the batch in every fourth slot, addressed in place; %s: through "
           "the Python API from torch CUDA graphs) over the dense step:",
           kPythonRow);
    for (const auto& l : slot_lines) out += "  " + l;
    out += "\n";
  }
  if (spread_noted)
    append(out, "* the timed runs differ by more than %.0f%%: the GPU's clock moved during the point\n",
           100 * kSpreadNote);
  if (!telemetry_lines.empty()) {
    append(out,
           "\nGPU telemetry over each timed part (NVML every %g ms): SM clock median [min-max] MHz, mean power "
           "(windows of %g s or more), hottest reading, clock limits; \"per clock\": %% of the matched floor at "
           "equal SM clocks\n",
           kTelemetryMs, kPowerMinSeconds);
    append(out, "%-16s %5s  %-48s | %-48s | %s\n", "backend", "B", "point", "matched floor", "per clock");
    for (const auto& l : telemetry_lines) out += l + "\n";
  }
  return out;
}

nlohmann::json bench_json(const BenchResults& res, const BenchRunInfo& info, const Config& cfg) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : res.rows) {
    const RowFigures f = figures(res, r, cfg);
    nlohmann::json jrow = {{"backend", r.name}, {"batch", r.batch}, {"ms_per_step", r.ms}, {"tok_per_s", f.tok_s},
                           {"tflops", f.tflops}, {"pct_of_floor", f.pct_floor}, {"speedup_vs_unfused", f.vs_unfused},
                           {"speedup_vs_gemms_alone", f.vs_gemms}, {"spread", r.spread},
                           {"matched_floor_tflops", r.matched_floor_tflops}, {"pct_of_matched_floor", f.pct_matched},
                           {"telemetry", telemetry_json(r.telemetry)},
                           {"matched_floor_telemetry", telemetry_json(r.matched_floor_telemetry)},
                           {"pct_of_matched_floor_per_clock", f.pct_matched_per_clock},
                           {"slot_step_over_dense", f.slot_over_dense}, {"precision", r.precision},
                           {"fp8_over_bf16", f.fp8_over_bf16}};
    if (!r.cpp_slots.empty()) {
      jrow["over_cpp_slot_step"] = f.over_cpp_slots;
      jrow["over_cpp_slot_step_same_process"] = f.over_cpp_same_process;
    }
    rows.push_back(jrow);
  }
  nlohmann::json j;
  j["device"] = info.device;
  j["driver"] = info.driver;
  j["runtime"] = info.runtime;
  j["commit"] = info.commit;
  j["build_commit"] = info.build_commit;
  j["date"] = info.date;
  j["config"] = cfg.to_json();
  j["tokens"] = info.tokens;
  j["repeats"] = info.repeats;
  j["warmup"] = info.warmup;
  j["flops_per_token"] = cfg.flops_per_token();
  j["peak_tflops"] = res.floor_tflops;
  j["cooldown_s"] = info.cooldown_s;
  j["telemetry_period_ms"] = kTelemetryMs;
  j["floor_telemetry"] = telemetry_json(res.floor_telemetry);
  const auto algorithms = [&](const char* row) {
    return nlohmann::json{{"gemms_per_step", gemms_per_step(cfg)}, {"algorithms", res.anchor_algorithms.at(row)}};
  };
  for (const AnchorSpec& a : kAnchors) {
    if (!res.anchor_algorithms.contains(a.name)) continue;
    if (a.headroom)
      j["fp8_headroom"][a.name] = algorithms(a.name);
    else
      (j[!a.operands.e4m3 ? "gemms_alone" : "fp8_gemms_alone"] = algorithms(a.name))["row"] =
          a.name;
  }
  if (!res.telemetry_note.empty()) j["telemetry_unavailable"] = res.telemetry_note;
  if (!res.power_note.empty()) j["power_unavailable"] = res.power_note;
  if (!res.python_note.empty()) j["python_unavailable"] = res.python_note;
  for (const FlipRate& f : res.flips) {
    std::vector<double> per_token;
    for (int64_t t = 0; t < f.tokens; ++t) per_token.push_back(f.rate(t));
    j["flip_rate"].push_back({{"engine", f.engine}, {"baseline", f.baseline}, {"batch", f.batch}, {"tokens", f.tokens},
                              {"per_token", per_token}, {"overall", f.overall()}});
  }
  j["rows"] = rows;
  return j;
}

}  // namespace swapffn::bench
