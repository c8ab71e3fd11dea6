#include "cuda/kernels/fp8_swiglu_quantize.hpp"

#include "cuda/kernels/fp8_block_quantize.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 128;  // blocks: four warps per CTA, a 1x128 block each

__device__ __forceinline__ float silu_mul(float g, float up) { return g / (1.f + expf(-g)) * up; }

__global__ void __launch_bounds__(kThreads)
    swiglu_quantize_e4m3_kernel(const __nv_bfloat16* gu, int64_t rows, int64_t F, uint8_t* q, float* scales) {
  pdl_wait();
  const int64_t kb_count = F / kFp8Block;
  const int64_t block = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;  // row * kb_count + kb
  if (block >= rows * kb_count) return;
  const int64_t row = block / kb_count, kb = block % kb_count;
  const int lane = threadIdx.x % 32;
  const int64_t f = kb * kFp8Block + 4 * lane;
  float g[4], up[4], u[4];
  load_bf16x4(gu + row * 2 * F + f, g);
  load_bf16x4(gu + row * 2 * F + F + f, up);
#pragma unroll
  for (int i = 0; i < 4; ++i) u[i] = silu_mul(g[i], up[i]);
  float scale = 0.f;
  *reinterpret_cast<uint32_t*>(q + row * F + f) = quantize_block_e4m3(u, scale);
  if (lane == 0) scales[kb * rows + row] = scale;
}

// Scaling::rows: one CTA per row (quantize_row_e4m3_cta), u computed from the loaded gate and up.
__global__ void __launch_bounds__(kRowThreads)
    swiglu_quantize_per_row_e4m3_kernel(const __nv_bfloat16* gu, int64_t F, uint8_t* q, float* scales) {
  pdl_wait();
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = gu + row * 2 * F;
  quantize_row_e4m3_cta(
      F,
      [&](int64_t f, float (&u)[4]) {
        float g[4], up[4];
        load_bf16x4(src + f, g);
        load_bf16x4(src + F + f, up);
#pragma unroll
        for (int i = 0; i < 4; ++i) u[i] = silu_mul(g[i], up[i]);
      },
      q + row * F, scales + row);
}

}  // namespace

void launch_swiglu_quantize_e4m3(fp8::Scaling scaling, const __nv_bfloat16* gu, int64_t rows, int64_t d_ff,
                                 uint8_t* q, float* scales, cudaStream_t stream, bool pdl) {
  SWAPFFN_ASSERT(d_ff > 0 && d_ff % kFp8Block == 0, "swiglu_quantize_e4m3: d_ff = " + std::to_string(d_ff) +
                                                        " is not a positive multiple of 128");
  if (rows == 0) return;
  if (scaling == fp8::Scaling::rows) {
    launch_kernel_ex(swiglu_quantize_per_row_e4m3_kernel, dim3(static_cast<unsigned>(rows)), dim3(kRowThreads),
                     dim3(1, 1, 1), 0, stream, pdl, gu, d_ff, q, scales);
    return;
  }
  const int64_t warps = rows * (d_ff / kFp8Block);
  const auto grid = static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
  launch_kernel_ex(swiglu_quantize_e4m3_kernel, dim3(grid), dim3(kThreads), dim3(1, 1, 1), 0, stream, pdl, gu, rows,
                   d_ff, q, scales);
}

}  // namespace swapffn::cuda
