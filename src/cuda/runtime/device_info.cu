// Device query for `swapffn info`, the tests' skip decision and the kernels' launch configs.
#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/device.hpp"

namespace swapffn {

GpuInfo query_gpu() {
  GpuInfo g;
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    cudaGetLastError();
    g.why_absent = e == cudaSuccess ? "no CUDA device" : std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    return g;
  }
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  g.present = true;
  g.name = p.name;
  g.sm_count = p.multiProcessorCount;
  g.cc_major = p.major;
  g.cc_minor = p.minor;
  g.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  g.smem_per_block_optin = p.sharedMemPerBlockOptin;
  g.global_mem_bytes = p.totalGlobalMem;
  CUDA_CHECK(cudaDriverGetVersion(&g.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&g.runtime_version));
  return g;
}

}  // namespace swapffn
