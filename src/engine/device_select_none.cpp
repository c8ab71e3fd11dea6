// select_gpu() of a CPU-only build: only device 0, the host.
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn {

void select_gpu(int device) {
  SWAPFFN_REQUIRE_AS(NoGpuError, device == 0, "device " + std::to_string(device) + ": this build has no CUDA (only device 0, the host)");
}

}  // namespace swapffn
