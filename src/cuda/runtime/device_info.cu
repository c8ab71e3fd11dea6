// Device query for `swapffn info`, the tests' skip decision and the kernels' launch configs.
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/device.hpp"

namespace swapffn {
namespace {

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// One plain sentence for each way the CUDA runtime finds no device to use: the runtime's own
// strings ("CUDA driver version is insufficient for CUDA runtime version" when there is no driver
// at all) mislead a newcomer.
std::string why_no_device(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
    case cudaErrorNoDevice: return "no NVIDIA GPU was found";
    case cudaErrorStubLibrary: return "no NVIDIA driver is installed (only the CUDA toolkit's stub library)";
    case cudaErrorInsufficientDriver: {
      int driver = 0, runtime = 0;
      if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return "no NVIDIA driver is installed";
      cudaRuntimeGetVersion(&runtime);
      return "the NVIDIA driver supports CUDA " + cuda_version(driver) + " only, and this build needs CUDA " +
             cuda_version(runtime) + ": update the driver";
    }
    case cudaErrorDevicesUnavailable: return "every NVIDIA GPU is busy or unavailable to this process";
    default: return std::string("the CUDA runtime cannot use a GPU here (") + cudaGetErrorString(e) + ")";
  }
}

}  // namespace

GpuInfo query_gpu() {
  GpuInfo g;
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    cudaGetLastError();
    g.why_absent = why_no_device(e);
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
