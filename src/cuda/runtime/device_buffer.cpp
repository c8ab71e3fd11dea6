#include "cuda/runtime/device_buffer.hpp"

#include <cstdio>
#include <limits>
#include <string>

namespace swapffn::cuda {

std::string format_bytes(double b) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char s[48];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

void* device_malloc(size_t n, size_t elem_bytes, const char* what) {
  // At least one element, so that every buffer has a valid, 256-byte aligned pointer.
  const size_t count = n == 0 ? 1 : n;
  const std::string asked = "cannot allocate " + std::string(what) + " on the GPU: " + std::to_string(n) + " x " +
                            std::to_string(elem_bytes) + " bytes";
  if (count > std::numeric_limits<size_t>::max() / elem_bytes) throw OutOfDeviceMemory(asked + " overflows");
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, count * elem_bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    const bool known = cudaMemGetInfo(&free, &total) == cudaSuccess;
    cudaGetLastError();
    throw OutOfDeviceMemory(asked + " = " + format_bytes(double(count) * double(elem_bytes)) +
                            (known ? ", with " + format_bytes(double(free)) + " free of " + format_bytes(double(total))
                                   : std::string(", more than the GPU has free")));
  }
  CUDA_CHECK(e);
  return p;
}

}  // namespace swapffn::cuda
