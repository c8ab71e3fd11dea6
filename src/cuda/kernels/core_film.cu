#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/row_reduce.cuh"

namespace swapffn::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kMaxPerThread = 8;  // rows up to 2048 values held in registers

// One block per (sequence, core) row.
__global__ void __launch_bounds__(kThreads) core_film_kernel(CoreFilmArgs a) {
  __shared__ float smem[kThreads / 32];
  const int64_t m = blockIdx.x, b = m / a.cores, c = m % a.cores, D = a.d_model;
  const float* x = a.io->x + b * D;
  const float* sc = a.scale + c * D;
  const float* sh = a.shift + c * D;
  float* h = a.h + m * D;
  float ss = 0.f;
  if (D <= kThreads * kMaxPerThread) {
    // All loads first, then the stores: interleaved, each iteration's loads would wait for the
    // previous store to h (it may alias them as far as the compiler knows). Same order of ss.
    float v[kMaxPerThread];
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int64_t d = threadIdx.x + i * kThreads;
      if (d < D) v[i] = fmaf(x[d], sc[d], sh[d]);
    }
#pragma unroll
    for (int i = 0; i < kMaxPerThread; ++i) {
      const int64_t d = threadIdx.x + i * kThreads;
      if (d < D) {
        h[d] = v[i];
        ss += v[i] * v[i];
      }
    }
  } else {
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const float v = fmaf(x[d], sc[d], sh[d]);
      h[d] = v;
      ss += v * v;
    }
  }
  if (a.norm_out) store_rmsnorm_row<kThreads>(h, ss, a.norm_gain, a.norm_out + m * D, D, a.eps, smem);
}
}  // namespace

void launch_core_film(const CoreFilmArgs& a, cudaStream_t stream) {
  SWAPFFN_ASSERT((a.norm_gain == nullptr) == (a.norm_out == nullptr), "core_film: norm gain and output go together");
  const int64_t rows = a.batch * a.cores;
  if (rows == 0) return;
  core_film_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(a);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
