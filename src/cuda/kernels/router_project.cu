#include "cuda/kernels/router_project.hpp"

#include <string>

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/mma_sm80.hpp>

#include "cuda/cuda_check.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kRows = 16;  // one m16 MMA tile of rows per CTA
constexpr int kWarps = 8;
constexpr int kPad = 8;  // bf16 elements of row padding: ldmatrix rows land in distinct banks

size_t smem_bytes(int64_t d) { return size_t(kRows) * size_t(d + kPad) * 2; }

__global__ void __launch_bounds__(kWarps * 32)
    router_project_kernel(const float* __restrict__ h, const float* __restrict__ gain,
                          const __nv_bfloat16* __restrict__ w, float* __restrict__ z, int rows, int D, int R,
                          float eps) {
  extern __shared__ __align__(16) __nv_bfloat16 n_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows;
  const int ld = D + kPad;

  for (int lr = warp; lr < kRows; lr += kWarps) {
    const int r = row0 + lr;
    __nv_bfloat16* dst = n_smem + lr * ld;
    if (r >= rows) {
      for (int k = lane * 2; k < D; k += 64) *reinterpret_cast<__nv_bfloat162*>(dst + k) = __floats2bfloat162_rn(0.f, 0.f);
      continue;
    }
    const float* src = h + size_t(r) * D;
    float ss = 0.f;
    for (int k = lane * 2; k < D; k += 64) {
      const float2 v = *reinterpret_cast<const float2*>(src + k);
      ss += v.x * v.x + v.y * v.y;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = rsqrtf(ss / float(D) + eps);
    for (int k = lane * 2; k < D; k += 64) {
      const float2 v = *reinterpret_cast<const float2*>(src + k);
      const float2 g = *reinterpret_cast<const float2*>(gain + k);
      *reinterpret_cast<__nv_bfloat162*>(dst + k) = __floats2bfloat162_rn(v.x * rs * g.x, v.y * rs * g.y);
    }
  }
  __syncthreads();

  const int g = lane / 4, t = lane % 4;
  for (int nb = warp; nb < R / 8; nb += kWarps) {
    const __nv_bfloat16* wrow = w + size_t(nb * 8 + g) * D + 2 * t;
    const __nv_bfloat16* arow = n_smem + (lane % 16) * ld + (lane / 16) * 8;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a0, a1, a2, a3;
      cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(arow + k0), a0, a1, a2, a3);
      const uint32_t b0 = __ldg(reinterpret_cast<const unsigned int*>(wrow + k0));
      const uint32_t b1 = __ldg(reinterpret_cast<const unsigned int*>(wrow + k0 + 8));
      cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(acc[0], acc[1], acc[2], acc[3], a0, a1, a2, a3, b0, b1, acc[0],
                                                acc[1], acc[2], acc[3]);
    }
    const int col = nb * 8 + 2 * t;
    if (row0 + g < rows) *reinterpret_cast<float2*>(z + size_t(row0 + g) * R + col) = make_float2(acc[0], acc[1]);
    if (row0 + g + 8 < rows)
      *reinterpret_cast<float2*>(z + size_t(row0 + g + 8) * R + col) = make_float2(acc[2], acc[3]);
  }
}

}  // namespace

void check_router_project_shape(int64_t d_model, int64_t d_router) {
  SWAPFFN_REQUIRE(d_model % 64 == 0, "router projection needs d_model % 64 == 0, got " + std::to_string(d_model));
  SWAPFFN_REQUIRE(d_router % 8 == 0, "router projection needs d_router % 8 == 0, got " + std::to_string(d_router));
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  SWAPFFN_REQUIRE(smem_bytes(d_model) <= size_t(optin),
                  "router projection: d_model " + std::to_string(d_model) + " needs more shared memory than the GPU has");
}

void launch_router_project(const RouterProjectArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const size_t smem = smem_bytes(a.d_model);
  CUDA_CHECK(cudaFuncSetAttribute(router_project_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const unsigned blocks = static_cast<unsigned>((a.rows + kRows - 1) / kRows);
  router_project_kernel<<<blocks, kWarps * 32, smem, stream>>>(a.h, a.gain, a.router_w, a.z, int(a.rows),
                                                               int(a.d_model), int(a.d_router), a.eps);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
