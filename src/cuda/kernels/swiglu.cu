#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/swiglu.hpp"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kVec = 8;  // bf16 per 16-byte access

__device__ __forceinline__ float silu_mul(float g, float up) { return g / (1.f + expf(-g)) * up; }

// Vector path: F % 8 == 0, so every 8-element group is 16-byte aligned in both halves.
__global__ void __launch_bounds__(kThreads)
    swiglu_vec_kernel(const __nv_bfloat16* gu, __nv_bfloat16* u, int64_t rows, int64_t F) {
  const int64_t groups_per_row = F / kVec;
  const int64_t n = rows * groups_per_row;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t m = i / groups_per_row, f = (i % groups_per_row) * kVec;
    const uint4 gv = *reinterpret_cast<const uint4*>(gu + m * 2 * F + f);
    const uint4 uv = *reinterpret_cast<const uint4*>(gu + m * 2 * F + F + f);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
    const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
    uint4 ov;
    __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&ov);
#pragma unroll
    for (int k = 0; k < kVec / 2; ++k) {
      const float2 g = __bfloat1622float2(g2[k]), up = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(silu_mul(g.x, up.x), silu_mul(g.y, up.y));
    }
    *reinterpret_cast<uint4*>(u + m * F + f) = ov;
  }
}

__global__ void __launch_bounds__(kThreads)
    swiglu_scalar_kernel(const __nv_bfloat16* gu, __nv_bfloat16* u, int64_t rows, int64_t F) {
  const int64_t n = rows * F;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t m = i / F, f = i % F;
    u[i] = __float2bfloat16_rn(
        silu_mul(__bfloat162float(gu[m * 2 * F + f]), __bfloat162float(gu[m * 2 * F + F + f])));
  }
}

unsigned grid_for(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);  // grid-stride beyond
}
}  // namespace

void launch_swiglu(const __nv_bfloat16* gu, __nv_bfloat16* u, int64_t rows, int64_t d_ff,
                   cudaStream_t stream) {
  if (rows == 0 || d_ff == 0) return;
  if (d_ff % kVec == 0) {
    swiglu_vec_kernel<<<grid_for(rows * d_ff / kVec), kThreads, 0, stream>>>(gu, u, rows, d_ff);
  } else {
    swiglu_scalar_kernel<<<grid_for(rows * d_ff), kThreads, 0, stream>>>(gu, u, rows, d_ff);
  }
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
