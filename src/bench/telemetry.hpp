// What the GPU's clock, temperature and power did while a benchmark point ran. A Hopper board runs
// at the clock its power and temperature limits allow (a lent H100 was seen at its 700 W cap within
// a second of load, then thermally slowed), so a time means little without the clock it ran at.
// These are the host-side types and the summary; the NVML sampler that fills them is CUDA-only.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace swapffn {

// Why the clock was held below its maximum (NVML's clock event reasons, grouped; our own flags so
// this header does not depend on nvml.h).
enum ClockLimit : unsigned {
  kClockLimitPower = 1u << 0,       // software power cap
  kClockLimitThermal = 1u << 1,     // software or hardware thermal slowdown
  kClockLimitHardware = 1u << 2,    // hardware slowdown or power brake (external signal)
  kClockLimitIdle = 1u << 3,        // the GPU was idle
  kClockLimitOther = 1u << 4,       // application clocks, sync boost, display, board or reliability policy
};
constexpr int kClockLimitCount = 5;

struct TelemetrySample {
  double sm_clock_mhz = 0;
  double temperature_c = 0;
  unsigned limits = 0;    // ClockLimit flags
  double power_w = -1;    // the board's instantaneous power; < 0: not readable on this board
};

struct TelemetrySummary {
  int samples = 0;
  double seconds = 0;  // length of the sampled window
  double sm_clock_mhz_median = 0, sm_clock_mhz_min = 0, sm_clock_mhz_max = 0;
  double temperature_c_max = 0;
  // Mean and highest of the samples' instantaneous power readings (0 where the board has none).
  double power_w_mean = 0, power_w_max = 0;
  std::array<int, kClockLimitCount> limit_samples{};  // samples during which each ClockLimit held (bit order)

  double limit_share(ClockLimit l) const;  // share of the samples during which l held
  // "power 85%, thermal 10%" (each limit seen, with its share of the samples), or "none".
  std::string limits_text() const;
};

// Summarises samples taken over `seconds`. Power is summarised only if every sample has it. Throws
// when there are no samples or a reading is not finite.
TelemetrySummary summarize_telemetry(const std::vector<TelemetrySample>& samples, double seconds);

const char* clock_limit_name(ClockLimit l);

}  // namespace swapffn
