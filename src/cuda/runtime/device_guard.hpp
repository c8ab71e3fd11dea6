// DeviceGuard: a device made current for a scope (the CUDA runtime's current device is per host
// thread, and a caller's, torch's say, may be another), the previous one restored after.
#pragma once
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&prev_));
    if (device != prev_) CUDA_CHECK(cudaSetDevice(device));
    changed_ = device != prev_;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(prev_);  // nothing to report from a destructor
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

}  // namespace swapffn::cuda
