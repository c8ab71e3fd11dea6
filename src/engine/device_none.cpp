// query_gpu() of a CPU-only build.
#include "swapffn/device.hpp"

namespace swapffn {

GpuInfo query_gpu() {
  GpuInfo g;
  g.why_absent = "this build of swapffn has no CUDA support";
  return g;
}

}  // namespace swapffn
