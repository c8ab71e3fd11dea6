// NvmlSampler of a build without nvml.h: every sampler is refused, so the bench runs without telemetry.
#include "bench/nvml_telemetry.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

struct NvmlSampler::Impl {};

NvmlSampler::NvmlSampler(std::chrono::microseconds) {
  SWAPFFN_FAIL("GPU telemetry: this build has no nvml.h (pip install nvidia-nvml-dev, then rebuild)");
}
NvmlSampler::~NvmlSampler() = default;
void NvmlSampler::start() {}
TelemetrySummary NvmlSampler::stop() { return {}; }
TelemetrySample NvmlSampler::sample() const { return {}; }
bool NvmlSampler::has_power() const { return false; }
const std::string& NvmlSampler::why_no_power() const {
  static const std::string why = "no nvml.h in this build";
  return why;
}

}  // namespace swapffn::cuda
