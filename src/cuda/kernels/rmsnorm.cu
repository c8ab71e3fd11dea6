#include "cuda/cuda_check.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/launch.hpp"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kWarpKernelThreads = 64;  // 2 rows per CTA: M = 512 rows spread over 256 CTAs

// Any D: one block per row.
__global__ void __launch_bounds__(kThreads)
    rmsnorm_bf16_kernel(const float* h, const float* gain, __nv_bfloat16* out, int64_t D, float eps) {
  __shared__ float smem[kThreads / 32];
  pdl_wait();
  const int64_t m = blockIdx.x;
  const float* row = h + m * D;
  float ss = 0.f;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) ss += row[d] * row[d];
  store_rmsnorm_row<kThreads>(row, ss, gain, out + m * D, D, eps, smem);
}

// D % 128 == 0: one warp per row with 16-byte loads all in flight (the block-per-row kernel is
// latency-bound: a dependent chain of L2 round trips per row).
__global__ void __launch_bounds__(kWarpKernelThreads)
    rmsnorm_bf16_warp_kernel(const float* h, const float* gain, __nv_bfloat16* out, int64_t rows, int D, float eps) {
  pdl_wait();
  const int64_t m = blockIdx.x * int64_t{kWarpKernelThreads / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (m >= rows) return;
  const float4* src = reinterpret_cast<const float4*>(h + m * D);
  float ss = 0.f;
#pragma unroll 8
  for (int k4 = lane; k4 < D / 4; k4 += 32) {
    const float4 v = src[k4];
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
  const float4* g4 = reinterpret_cast<const float4*>(gain);
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(out + m * D);
#pragma unroll 8
  for (int k4 = lane; k4 < D / 4; k4 += 32) {
    const float4 v = src[k4], g = g4[k4];
    dst[2 * k4] = __floats2bfloat162_rn(v.x * inv * g.x, v.y * inv * g.y);
    dst[2 * k4 + 1] = __floats2bfloat162_rn(v.z * inv * g.z, v.w * inv * g.w);
  }
}
}  // namespace

void launch_rmsnorm_bf16(const float* h, const float* gain, __nv_bfloat16* out, int64_t rows, int64_t d_model,
                         float eps, cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  if (d_model % 128 == 0) {
    constexpr int per_block = kWarpKernelThreads / 32;
    const auto blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
    launch_kernel_ex(rmsnorm_bf16_warp_kernel, dim3(blocks), dim3(kWarpKernelThreads), dim3(1, 1, 1), 0, stream, pdl, h, gain,
                     out, rows, static_cast<int>(d_model), eps);
  } else {
    launch_kernel_ex(rmsnorm_bf16_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), dim3(1, 1, 1), 0, stream,
                     pdl, h, gain, out, d_model, eps);
  }
}

}  // namespace swapffn::cuda
