// The NVML sampler on the present GPU: readings in physical ranges, a window of GEMM load sampled at
// about its period, with a plausible power for a board under load; misuse is refused.
#include <gtest/gtest.h>

#include <chrono>

#include "bench/bench_runner.hpp"
#include "bench/nvml_telemetry.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/error.hpp"

namespace swapffn {
namespace {

TEST(NvmlTelemetry, SamplesAWindowOfGemmLoad) {
  using namespace std::chrono_literals;
  cuda::NvmlSampler sampler(2ms);  // NVML comes with the driver: a GPU machine without it is a failure
  const TelemetrySample now = sampler.sample();
  EXPECT_GT(now.sm_clock_mhz, 0.0);
  EXPECT_LT(now.sm_clock_mhz, 5000.0);
  EXPECT_GT(now.temperature_c, 0.0);
  EXPECT_LT(now.temperature_c, 130.0);
  EXPECT_THROW(sampler.stop(), Error);  // no window open

  sampler.start();
  EXPECT_THROW(sampler.start(), Error);  // one window at a time
  const double tflops = cuda::measure_bf16_gemm_tflops(2048, 2, 10, 300);  // >= 300 ms of GEMMs
  const TelemetrySummary t = sampler.stop();
  EXPECT_GT(tflops, 0.0);
  EXPECT_GE(t.seconds, 0.3);
  // A sample every 2 ms: at least a quarter of the expected count (the thread may be descheduled).
  EXPECT_GE(t.samples, static_cast<int>(t.seconds / 0.002 / 4)) << t.seconds << " s";
  EXPECT_GT(t.sm_clock_mhz_min, 0.0);
  EXPECT_LE(t.sm_clock_mhz_min, t.sm_clock_mhz_median);
  EXPECT_LE(t.sm_clock_mhz_median, t.sm_clock_mhz_max);
  EXPECT_LT(t.limit_share(kClockLimitIdle), 0.5) << "the GPU read as idle while running GEMMs";
  if (sampler.has_power()) {
    EXPECT_GT(now.power_w, 0.0);
    EXPECT_GT(t.power_w_mean, 100.0);  // a Hopper board under GEMM load
    EXPECT_LE(t.power_w_mean, t.power_w_max);
    EXPECT_LT(t.power_w_max, 2000.0);
  }

  sampler.start();  // a second window starts afresh
  const TelemetrySummary idle = sampler.stop();
  EXPECT_GE(idle.samples, 1);
  EXPECT_LT(idle.seconds, t.seconds);
}

}  // namespace
}  // namespace swapffn
