// GPU points of `swapffn bench`: each after a cool-down, timed over an NVML telemetry window, then
// its matched floor (the floor GEMM after the same pause, for as long as the point ran), so that a
// point's distance to the floor splits into the machine's sustained clock and the kernels.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bench/bench_rows.hpp"
#include "bench/bench_runner.hpp"
#include "bench/nvml_telemetry.hpp"

namespace swapffn::bench {

class GpuPointTimer {
 public:
  // Measures the floor first (a bf16 GEMM of kFloorN cubed, bench_report.hpp).
  explicit GpuPointTimer(double cooldown_s);
  ~GpuPointTimer();

  // After the cool-down, `timed` measures the point over a telemetry window; then the matched floor.
  // False (no floor) when `timed` could not measure.
  bool point(BenchRow& r, const std::function<std::optional<cuda::DecodeTiming>(const cuda::TimedWindow&)>& timed);

  double floor_tflops = 0;
  std::optional<TelemetrySummary> floor_telemetry;
  std::string telemetry_note, power_note;  // why there is no telemetry, or no power in it

 private:
  cuda::TimedWindow window(std::optional<TelemetrySummary>& out);
  void cool() const;

  double cooldown_s_;
  std::unique_ptr<cuda::NvmlSampler> sampler_;
};

}  // namespace swapffn::bench
