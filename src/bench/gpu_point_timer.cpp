#include "bench/gpu_point_timer.hpp"

#include <chrono>
#include <thread>

#include "bench/bench_report.hpp"
#include "swapffn/error.hpp"

namespace swapffn::bench {

GpuPointTimer::GpuPointTimer(double cooldown_s) : cooldown_s_(cooldown_s) {
  try {  // NVML is optional: without it the times stand, and the output says why it is absent
    sampler_ = std::make_unique<cuda::NvmlSampler>(std::chrono::microseconds(static_cast<int64_t>(kTelemetryMs * 1000)));
    if (!sampler_->has_power()) power_note = sampler_->why_no_power();
  } catch (const Error& e) {
    telemetry_note = e.what();
  }
  floor_tflops = cuda::measure_bf16_gemm_tflops(kFloorN, 3, 10, 0, window(floor_telemetry));
}

GpuPointTimer::~GpuPointTimer() = default;

bool GpuPointTimer::point(BenchRow& r,
                          const std::function<std::optional<cuda::DecodeTiming>(const cuda::TimedWindow&)>& timed) {
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

cuda::TimedWindow GpuPointTimer::window(std::optional<TelemetrySummary>& out) {
  if (!sampler_) return {};
  return {[this] { sampler_->start(); }, [this, &out] { out = sampler_->stop(); }};
}

void GpuPointTimer::cool() const { std::this_thread::sleep_for(std::chrono::duration<double>(cooldown_s_)); }

}  // namespace swapffn::bench
