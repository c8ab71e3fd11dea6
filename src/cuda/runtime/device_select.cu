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

int gpu_sm_count(int device) {
  int n = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

bool stream_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

// One cudaGetDevice when `device` is already current (the NVFP4 functions' per-call path).
DeviceScope::DeviceScope(int device) {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {  // no usable GPU or driver
    cudaGetLastError();
    select_gpu(device);  // device 0: the host; another refused (NoGpuError)
    return;
  }
  if (device == current) return;
  select_gpu(device);
  previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // nothing to report from a destructor
}

}  // namespace swapffn
