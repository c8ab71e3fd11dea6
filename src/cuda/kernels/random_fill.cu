#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/random_fill.hpp"

#include <cuda_fp8.h>

namespace swapffn::cuda {
namespace {

__device__ float uniform_pm1(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;  // splitmix64 of (seed, index)
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.f / 16777216.f) - 1.f;
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = uniform_pm1(seed, static_cast<uint64_t>(i)) * scale;
    if constexpr (sizeof(T) == 1)
      p[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    else if constexpr (sizeof(T) == 2)
      p[i] = __float2bfloat16_rn(v);
    else
      p[i] = v;
  }
}

}  // namespace

void fill_random_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  SWAPFFN_CHECK_LAUNCH();
}

void fill_random_f32(float* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  SWAPFFN_CHECK_LAUNCH();
}

void fill_random_e4m3(uint8_t* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
