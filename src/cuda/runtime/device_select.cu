#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/device.hpp"

namespace swapffn {

void select_gpu(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (n == 0 && device == 0) return;  // host backends only
  SWAPFFN_REQUIRE_AS(NoGpuError, device >= 0 && device < n, "device " + std::to_string(device) + ": this machine has " +
                                                 std::to_string(n) + " CUDA device(s)");
  CUDA_CHECK(cudaSetDevice(device));
}

}  // namespace swapffn
