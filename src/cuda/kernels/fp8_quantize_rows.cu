#include "cuda/kernels/fp8_quantize_rows.hpp"

#include "cuda/kernels/fp8_block_quantize.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kThreads = 128;  // blocks: four warps per CTA, a 1x128 block each

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

// Scaling::rows: one CTA per row (quantize_row_e4m3_cta).
__global__ void __launch_bounds__(kRowThreads)
    quantize_rows_per_row_e4m3_kernel(const __nv_bfloat16* x, int64_t k, uint8_t* q, float* scales) {
  pdl_wait();
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = x + row * k;
  quantize_row_e4m3_cta(k, [&](int64_t c, float (&v)[4]) { load_bf16x4(src + c, v); }, q + row * k, scales + row);
}

}  // namespace

void launch_quantize_rows_e4m3(fp8::Scaling scaling, const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q,
                               float* scales, cudaStream_t stream, bool pdl) {
  SWAPFFN_ASSERT(k > 0 && k % kFp8Block == 0, "quantize_rows_e4m3: k = " + std::to_string(k) +
                                                  " is not a positive multiple of 128");
  if (rows == 0) return;
  if (scaling == fp8::Scaling::rows) {
    launch_kernel_ex(quantize_rows_per_row_e4m3_kernel, dim3(static_cast<unsigned>(rows)), dim3(kRowThreads),
                     dim3(1, 1, 1), 0, stream, pdl, x, k, q, scales);
    return;
  }
  const int64_t warps = rows * (k / kFp8Block);
  const auto grid = static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
  launch_kernel_ex(quantize_rows_e4m3_kernel, dim3(grid), dim3(kThreads), dim3(1, 1, 1), 0, stream, pdl, x, rows, k, q,
                   scales);
}

}  // namespace swapffn::cuda
