#include "cuda/kernels/fp8_quantize_rows.hpp"

#include "cuda/kernels/fp8_block_quantize.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 128;  // four warps per CTA: a 1x128 block (blocks) or a row (rows) each

__global__ void __launch_bounds__(kThreads)
    quantize_rows_e4m3_kernel(const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q, float* scales) {
  pdl_wait();
  const int64_t kb_count = k / kFp8Block;
  const int64_t block = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;  // row * kb_count + kb
  if (block >= rows * kb_count) return;
  const int64_t row = block / kb_count, kb = block % kb_count;
  const int lane = threadIdx.x % 32;
  const int64_t at = row * k + kb * kFp8Block + 4 * lane;
  float v[4];
  load_bf16x4(x + at, v);
  float scale = 0.f;
  *reinterpret_cast<uint32_t*>(q + at) = quantize_block_e4m3(v, scale);
  if (lane == 0) scales[kb * rows + row] = scale;
}

// Scaling::rows: one warp per row, two passes over it (the row's amax, then its codes), so a row of
// any length needs no registers of its own.
__global__ void __launch_bounds__(kThreads)
    quantize_rows_per_row_e4m3_kernel(const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q, float* scales) {
  pdl_wait();
  const int64_t row = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const __nv_bfloat16* src = x + row * k;
  float amax = 0.f;
  for (int64_t c = 4 * lane; c < k; c += kFp8Block) {
    float v[4];
    load_bf16x4(src + c, v);
    amax = fmaxf(amax, amax4(v));
  }
  const float scale = group_scale_e4m3(warp_amax(amax));
  for (int64_t c = 4 * lane; c < k; c += kFp8Block) {
    float v[4];
    load_bf16x4(src + c, v);
    *reinterpret_cast<uint32_t*>(q + row * k + c) = encode_e4m3x4(v, scale);
  }
  if (lane == 0) scales[row] = scale;
}

}  // namespace

void launch_quantize_rows_e4m3(fp8::Scaling scaling, const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q,
                               float* scales, cudaStream_t stream, bool pdl) {
  SWAPFFN_ASSERT(k > 0 && k % kFp8Block == 0, "quantize_rows_e4m3: k = " + std::to_string(k) +
                                                  " is not a positive multiple of 128");
  if (rows == 0) return;
  if (scaling == fp8::Scaling::rows) {
    const auto grid = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
    launch_kernel_ex(quantize_rows_per_row_e4m3_kernel, dim3(grid), dim3(kThreads), dim3(1, 1, 1), 0, stream, pdl, x,
                     rows, k, q, scales);
    return;
  }
  const int64_t warps = rows * (k / kFp8Block);
  const auto grid = static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
  launch_kernel_ex(quantize_rows_e4m3_kernel, dim3(grid), dim3(kThreads), dim3(1, 1, 1), 0, stream, pdl, x, rows, k, q,
                   scales);
}

}  // namespace swapffn::cuda
