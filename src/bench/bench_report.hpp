// What `swapffn bench` reports from its measured rows: each row's derived figures (tok/s, TF/s, % of
// the floor, the ratios to the rows it is set against), the text table with its notes, and the JSON
// document. Host-only and testable without a GPU or the CLI.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_rows.hpp"
#include "swapffn/config.hpp"
#include "swapffn/flip_rate.hpp"

namespace swapffn::bench {

inline constexpr int kFloorN = 8192;               // the square bf16 GEMM that sets the floor
inline constexpr double kTelemetryMs = 5;        // NVML sampling period
inline constexpr double kSpreadNote = 0.05;      // rows whose timed runs differ by more: the clock moved
inline constexpr double kPowerMinSeconds = 0.5;  // shorter windows get no power figure (readings trail)

struct BenchResults {
  std::vector<BenchRow> rows;
  double floor_tflops = 0;
  std::optional<TelemetrySummary> floor_telemetry;
  std::string telemetry_note, power_note;  // why there is no telemetry, or no power in it
  std::string python_note;                 // why --python's row did not run
  nlohmann::json anchor_algorithms = nlohmann::json::object();  // cuBLASLt's picks, per anchor row and batch
  std::vector<FlipRate> flips;  // each fp8 row's free-running decisions against fused (bf16)

  // The time of row `name` at `batch`, 0 when it did not run.
  double ms_of(const std::string& name, int64_t batch) const;
};

struct RowFigures {
  double tok_s = 0, tflops = 0;
  double pct_floor = 0, pct_matched = 0, pct_matched_per_clock = 0;  // 0: no floor, or no clocks
  double vs_unfused = 0, vs_gemms = 0;   // the other row's time over this one's (0: it did not run)
  double fp8_over_bf16 = 0;              // an fp8 row: its bf16 twin's time over its own
  double slot_over_dense = 0;            // a slot-step row: its time over the dense step's
  double over_cpp_slots = 0, over_cpp_same_process = 0;  // the python row
};
RowFigures figures(const BenchResults& res, const BenchRow& r, const Config& cfg);

// The table, the notes under it and the telemetry lines, as `swapffn bench` prints them.
std::string report_text(const BenchResults& res, const Config& cfg);

// Who ran what: the document's header fields.
struct BenchRunInfo {
  std::string device, driver, runtime, commit, build_commit, date;
  int tokens = 0, repeats = 0, warmup = 0;
  double cooldown_s = 0;
};
// The whole JSON document of a run (`bench --json`).
nlohmann::json bench_json(const BenchResults& res, const BenchRunInfo& info, const Config& cfg);

nlohmann::json telemetry_json(const std::optional<TelemetrySummary>& t);
// "1755 [1610-1980]  699 W  71 C  power 95%" ("   - W" where the power is not known)
std::string telemetry_text(const TelemetrySummary& t);

}  // namespace swapffn::bench
