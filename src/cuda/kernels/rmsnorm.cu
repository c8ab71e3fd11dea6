#include "cuda/kernels/rmsnorm.hpp"

#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/runtime/launch.hpp"

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
// latency-bound: a dependent chain of L2 round trips per row). Up to D = 1024 the row stays in
// registers between the sum of squares and the scaled write (one read of h instead of two).
constexpr int kMaxVec = 8;  // float4 per lane
template <bool kInRegisters>
__global__ void __launch_bounds__(kWarpKernelThreads)
    rmsnorm_warp_kernel(const float* h, const float* gain, FfnOperand out, int64_t rows, int D, float eps) {
  pdl_wait();
  pdl_launch_dependents();  // the next kernel may start its prologue; its own wait covers this grid
  const int64_t m = blockIdx.x * int64_t{kWarpKernelThreads / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (m >= rows) return;
  const float4* src = reinterpret_cast<const float4*>(h + m * D);
  const float4* g4 = reinterpret_cast<const float4*>(gain);
  // float4 lane + 32 i of the row is its 1x128 block i's (store_ffn_operand).
  const auto store = [&](int i, const float4& v, const float4& g, float inv) {
    store_ffn_operand(out, m, rows, D, i, lane, v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
  };
  float ss = 0.f;
  if constexpr (kInRegisters) {
    // The gains are loaded with the row, up front: interleaved with the stores, each gain load
    // would wait for the store before it (out may alias gain as far as the compiler knows), a
    // chain of dependent round trips.
    const int nvec = D / 128;
    float4 v[kMaxVec], g[kMaxVec];
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) {
        v[i] = src[lane + 32 * i];
        g[i] = g4[lane + 32 * i];
      }
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
    store_ffn_operand_row<kMaxVec>(out, m, rows, D, lane, [&](int i) {
      return make_float4(v[i].x * inv * g[i].x, v[i].y * inv * g[i].y, v[i].z * inv * g[i].z, v[i].w * inv * g[i].w);
    });
  } else {
#pragma unroll 8
    for (int k4 = lane; k4 < D / 4; k4 += 32) {
      const float4 v = src[k4];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(D) + eps);
#pragma unroll 8
    for (int i = 0; i < D / 128; ++i) store(i, src[lane + 32 * i], g4[lane + 32 * i], inv);
  }
}
}  // namespace

void launch_rmsnorm(const float* h, const float* gain, const FfnOperand& out, int64_t rows, int64_t d_model, float eps,
                    cudaStream_t stream, bool pdl) {
  SWAPFFN_ASSERT(out.any() && out.well_formed(), "rmsnorm: the output must be bf16 rows or e4m3 codes with scales");
  SWAPFFN_ASSERT(!out.per_row || d_model <= 128 * kMaxVec,
                 "rmsnorm: e4m3 with one scale per row needs the row in registers (d_model <= " +
                     std::to_string(128 * kMaxVec) + "), got " + std::to_string(d_model));
  if (rows == 0) return;
  if (d_model % 128 == 0) {
    constexpr int per_block = kWarpKernelThreads / 32;
    const auto blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
    const auto kernel = d_model <= 128 * kMaxVec ? rmsnorm_warp_kernel<true> : rmsnorm_warp_kernel<false>;
    launch_kernel_ex(kernel, dim3(blocks), dim3(kWarpKernelThreads), dim3(1, 1, 1), 0, stream, pdl, h, gain, out, rows,
                     static_cast<int>(d_model), eps);
  } else {
    SWAPFFN_ASSERT(out.e4m3 == nullptr, "rmsnorm: e4m3 output needs d_model % 128 == 0, got " + std::to_string(d_model));
    launch_kernel_ex(rmsnorm_bf16_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), dim3(1, 1, 1), 0, stream,
                     pdl, h, gain, out.bf16, d_model, eps);
  }
}

}  // namespace swapffn::cuda
