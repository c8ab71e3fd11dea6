// The summary of a benchmark point's GPU telemetry (host code: CI tests it without a GPU).
#include "bench/telemetry.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "swapffn/error.hpp"

namespace swapffn {

const char* clock_limit_name(ClockLimit l) {
  switch (l) {
    case kClockLimitPower: return "power";
    case kClockLimitThermal: return "thermal";
    case kClockLimitHardware: return "hw-slowdown";
    case kClockLimitIdle: return "idle";
    case kClockLimitOther: return "other";
  }
  return "?";
}

double TelemetrySummary::limit_share(ClockLimit l) const {
  for (int b = 0; b < kClockLimitCount; ++b)
    if ((1u << b) == static_cast<unsigned>(l)) return samples > 0 ? double(limit_samples[b]) / samples : 0.0;
  SWAPFFN_FAIL("limit_share: not a single ClockLimit flag: " + std::to_string(static_cast<unsigned>(l)));
}

std::string TelemetrySummary::limits_text() const {
  std::string s;
  for (int b = 0; b < kClockLimitCount; ++b) {
    if (limit_samples[b] == 0) continue;
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%s%s %.0f%%", s.empty() ? "" : ", ", clock_limit_name(ClockLimit(1u << b)),
                  100.0 * limit_samples[b] / samples);
    s += buf;
  }
  return s.empty() ? "none" : s;
}

TelemetrySummary summarize_telemetry(const std::vector<TelemetrySample>& samples, double seconds) {
  SWAPFFN_REQUIRE(!samples.empty(), "telemetry: no samples in the window");
  SWAPFFN_REQUIRE(std::isfinite(seconds) && seconds > 0, "telemetry: the window must have a positive length");
  TelemetrySummary t;
  t.samples = static_cast<int>(samples.size());
  t.seconds = seconds;
  std::vector<double> clocks;
  clocks.reserve(samples.size());
  t.temperature_c_max = samples.front().temperature_c;
  const bool power = samples.front().power_w >= 0;
  double power_sum = 0;
  for (const auto& s : samples) {
    SWAPFFN_REQUIRE(std::isfinite(s.sm_clock_mhz) && s.sm_clock_mhz >= 0 && std::isfinite(s.temperature_c) &&
                        std::isfinite(s.power_w),
                    "telemetry: a sample's clock, temperature or power is not a finite reading");
    SWAPFFN_REQUIRE((s.power_w >= 0) == power, "telemetry: power was readable in some samples of the window only");
    clocks.push_back(s.sm_clock_mhz);
    t.temperature_c_max = std::max(t.temperature_c_max, s.temperature_c);
    if (power) {
      power_sum += s.power_w;
      t.power_w_max = std::max(t.power_w_max, s.power_w);
    }
    for (int b = 0; b < kClockLimitCount; ++b) t.limit_samples[b] += (s.limits >> b) & 1u;
  }
  std::sort(clocks.begin(), clocks.end());
  const size_t n = clocks.size();
  t.sm_clock_mhz_median = n % 2 ? clocks[n / 2] : 0.5 * (clocks[n / 2 - 1] + clocks[n / 2]);
  t.sm_clock_mhz_min = clocks.front();
  t.sm_clock_mhz_max = clocks.back();
  t.power_w_mean = power ? power_sum / static_cast<double>(n) : 0;
  return t;
}

}  // namespace swapffn
