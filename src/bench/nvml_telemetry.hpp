// Samples the current CUDA device's SM clock, temperature, instantaneous power and clock limits
// through NVML on a background thread: what `swapffn bench` reports beside each point's time.
// Host-only types in this header.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "bench/telemetry.hpp"

namespace swapffn::cuda {

class NvmlSampler {
 public:
  // Samples the current CUDA device: the NVML device with its PCI bus id (so CUDA_VISIBLE_DEVICES is
  // honoured). Throws Error naming what failed: the driver's NVML library missing, no NVML device at
  // that bus id, or a clock or temperature reading the board refuses. A board whose power cannot be
  // read is sampled without it (has_power() false, why_no_power() says why).
  explicit NvmlSampler(std::chrono::microseconds period);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  void start();               // begins a window: clears the samples
  TelemetrySummary stop();    // ends it; throws if a reading failed during the window
  TelemetrySample sample() const;  // one reading now
  bool has_power() const;
  const std::string& why_no_power() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swapffn::cuda
