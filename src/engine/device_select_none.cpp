// select_gpu() of a CPU-only build: only device 0, the host.
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn {

void select_gpu(int device) {
  SWAPFFN_REQUIRE_AS(NoGpuError, device == 0, "device " + std::to_string(device) + ": this build has no CUDA (only device 0, the host)");
}

int gpu_sm_count(int) { throw NoGpuError("this build has no CUDA: no GPU to count SMs of"); }
bool stream_capturing(void*) { throw NoGpuError("this build has no CUDA: no CUDA streams"); }

DeviceScope::DeviceScope(int device) { select_gpu(device); }
DeviceScope::~DeviceScope() = default;

}  // namespace swapffn
