// The summary of a bench point's GPU telemetry: medians, extremes, mean and highest power, and the
// share of samples under each clock limit; bad windows are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "swapffn/error.hpp"
#include "bench/telemetry.hpp"

namespace swapffn {
namespace {

TEST(Telemetry, SummaryOfSamples) {
  const std::vector<TelemetrySample> s = {{1980, 41, 0, 400},
                                          {1755, 55, kClockLimitPower, 700},
                                          {1410, 70, kClockLimitPower | kClockLimitThermal, 690},
                                          {1620, 66, kClockLimitPower, 610}};
  const TelemetrySummary t = summarize_telemetry(s, 0.5);
  EXPECT_EQ(t.samples, 4);
  EXPECT_DOUBLE_EQ(t.seconds, 0.5);
  EXPECT_DOUBLE_EQ(t.sm_clock_mhz_median, 0.5 * (1620 + 1755));  // even count: the mean of the middle two
  EXPECT_DOUBLE_EQ(t.sm_clock_mhz_min, 1410);
  EXPECT_DOUBLE_EQ(t.sm_clock_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(t.temperature_c_max, 70);
  EXPECT_DOUBLE_EQ(t.power_w_mean, 600);
  EXPECT_DOUBLE_EQ(t.power_w_max, 700);
  EXPECT_DOUBLE_EQ(t.limit_share(kClockLimitPower), 0.75);
  EXPECT_DOUBLE_EQ(t.limit_share(kClockLimitThermal), 0.25);
  EXPECT_DOUBLE_EQ(t.limit_share(kClockLimitIdle), 0.0);
  EXPECT_EQ(t.limits_text(), "power 75%, thermal 25%");

  const TelemetrySummary odd = summarize_telemetry({s[0], s[1], s[2]}, 1.0);
  EXPECT_DOUBLE_EQ(odd.sm_clock_mhz_median, 1755);
  const TelemetrySummary no_power = summarize_telemetry({{1500, 50, 0, -1}, {1600, 50, 0, -1}}, 1.0);
  EXPECT_DOUBLE_EQ(no_power.power_w_mean, 0);  // a board without a power reading
  EXPECT_DOUBLE_EQ(no_power.power_w_max, 0);
  EXPECT_EQ(summarize_telemetry({s[0]}, 1.0).limits_text(), "none");
  EXPECT_EQ(summarize_telemetry({{900, 30, kClockLimitIdle | kClockLimitHardware | kClockLimitOther, 80}}, 1.0)
                .limits_text(),
            "hw-slowdown 100%, idle 100%, other 100%");
}

TEST(Telemetry, BadWindowsAreRefused) {
  const TelemetrySample ok{1500, 50, 0, 300};
  EXPECT_THROW(summarize_telemetry({}, 1.0), Error);
  EXPECT_THROW(summarize_telemetry({ok}, 0.0), Error);
  EXPECT_THROW(summarize_telemetry({ok}, std::nan("")), Error);
  EXPECT_THROW(summarize_telemetry({ok, {std::numeric_limits<double>::infinity(), 50, 0, 300}}, 1.0), Error);
  EXPECT_THROW(summarize_telemetry({ok, {1500, std::nan(""), 0, 300}}, 1.0), Error);
  EXPECT_THROW(summarize_telemetry({ok, {1500, 50, 0, std::nan("")}}, 1.0), Error);
  EXPECT_THROW(summarize_telemetry({ok, {-1, 50, 0, 300}}, 1.0), Error);
  EXPECT_THROW(summarize_telemetry({ok, {1500, 50, 0, -1}}, 1.0), Error);  // power in some samples only
  EXPECT_THROW(summarize_telemetry({ok}, 1.0).limit_share(ClockLimit(kClockLimitPower | kClockLimitThermal)), Error);
}

}  // namespace
}  // namespace swapffn
