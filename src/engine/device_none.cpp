// query_gpu() of a CPU-only build.
#include "swapffn/device.hpp"

namespace swapffn {

GpuInfo query_gpu() {
  GpuInfo g;
  g.why_absent = "built without CUDA";
  return g;
}

}  // namespace swapffn
