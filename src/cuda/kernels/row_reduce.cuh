// Deterministic reductions for kernels that give one thread block (or warp) to one row.
// Fixed summation order (xor butterfly within a warp, then warp totals in index order): the result
// never depends on timing, so runs and batch compositions give identical bits.
#pragma once
#include <cuda_bf16.h>

namespace swapffn::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // identical in every lane
}

// Sum over a block of kThreads threads; every thread gets the total. smem holds kThreads/32 floats.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* smem) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block must be whole warps, at most 1024 threads");
  constexpr int kWarps = kThreads / 32;
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read from a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  float t = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += smem[w];
  return t;
}

// Writes out[d] = bf16(h[d] * rsqrt(ss_total / D + eps) * gain[d]) for one row; sum_sq is this
// thread's partial sum of squares of the row, reduced here over the block.
template <int kThreads>
__device__ __forceinline__ void store_rmsnorm_row(const float* h, float sum_sq, const float* gain,
                                                  __nv_bfloat16* out, int64_t D, float eps, float* smem) {
  const float total = block_sum<kThreads>(sum_sq, smem);
  const float inv = rsqrtf(total / static_cast<float>(D) + eps);
  for (int64_t d = threadIdx.x; d < D; d += kThreads) out[d] = __float2bfloat16_rn(h[d] * inv * gain[d]);
}

}  // namespace swapffn::cuda
