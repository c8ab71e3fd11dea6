#include "cuda/cuda_check.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/row_reduce.cuh"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rmsnorm_bf16_kernel(const float* h, const float* gain, __nv_bfloat16* out, int64_t D, float eps) {
  __shared__ float smem[kThreads / 32];
  const int64_t m = blockIdx.x;
  const float* row = h + m * D;
  float ss = 0.f;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) ss += row[d] * row[d];
  store_rmsnorm_row<kThreads>(row, ss, gain, out + m * D, D, eps, smem);
}
}  // namespace

void launch_rmsnorm_bf16(const float* h, const float* gain, __nv_bfloat16* out, int64_t rows,
                         int64_t d_model, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  rmsnorm_bf16_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(h, gain, out, d_model, eps);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
