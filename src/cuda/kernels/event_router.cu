#include "cuda/kernels/event_router.hpp"

#include <string>

#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/mma_sm80.hpp>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/row_reduce.cuh"
#include "cuda/launch.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kRows = 16;  // one m16 MMA tile of rows per CTA
constexpr int kWarps = 8;
constexpr int kPad = 8;         // bf16 elements of row padding: ldmatrix rows land in distinct banks
constexpr int kNBlocks = 8;     // n8 blocks of z per pass (64 columns)
constexpr int kMaxRouter = 256;

struct Smem {
  size_t n_bytes, h_bytes, partial_bytes, z_bytes;
  __host__ __device__ size_t total() const { return n_bytes + h_bytes + partial_bytes + z_bytes; }
};
__host__ __device__ Smem smem_layout(int64_t d, int64_t r) {
  return {size_t(kRows) * size_t(d + kPad) * 2, size_t(kRows) * size_t(d) * 4,
          size_t(kWarps) * kRows * kNBlocks * 8 * 4, size_t(kRows) * size_t(r) * 4};
}

__device__ __forceinline__ uint8_t swap_lanes_0_j(uint8_t map, int j) {
  const int l0 = map & 3, lj = (map >> (2 * j)) & 3;
  const int cleared = map & ~(3 | (3 << (2 * j)));
  return static_cast<uint8_t>(cleared | lj | (l0 << (2 * j)));  // j == 0 gives map back
}

__device__ __forceinline__ uint2 pack_bf16x4(float a, float b, float c, float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}
__device__ __forceinline__ float4 unpack_bf16x4(uint2 v) {
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&v.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&v.y);
  return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
}

__global__ void __launch_bounds__(kWarps * 32) event_router_kernel(EventRouterArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int D = static_cast<int>(a.d_model), R = static_cast<int>(a.d_router), rows = static_cast<int>(a.rows);
  const Smem L = smem_layout(D, R);
  __nv_bfloat16* n_smem = reinterpret_cast<__nv_bfloat16*>(smem);
  float* h_smem = reinterpret_cast<float*>(smem + L.n_bytes);
  float* partial = reinterpret_cast<float*>(smem + L.n_bytes + L.h_bytes);  // [warp][16][64]
  float* z_smem = reinterpret_cast<float*>(smem + L.n_bytes + L.h_bytes + L.partial_bytes);  // [16][R]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows;
  const int ld = D + kPad, D4 = D / 4;

  pdl_wait();  // h, ram and the maps were written by the previous kernels of the step
  pdl_launch_dependents();

  // 1. Rows into shared memory: fp32 h, and the router operand bf16(rms(h) * router_norm).
  for (int lr = warp; lr < kRows; lr += kWarps) {
    const int r = row0 + lr;
    const float4* src = reinterpret_cast<const float4*>(a.h + size_t(r < rows ? r : 0) * D);
    float4* hs = reinterpret_cast<float4*>(h_smem + lr * D);
    float ss = 0.f;
#pragma unroll 8
    for (int k4 = lane; k4 < D4; k4 += 32) {
      const float4 v = src[k4];
      hs[k4] = v;
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    const float rs = r < rows ? rsqrtf(ss / float(D) + a.eps) : 0.f;  // rows past the end: zeros
    const float4* g4 = reinterpret_cast<const float4*>(a.router_gain);
    uint2* dst = reinterpret_cast<uint2*>(n_smem + lr * ld);
#pragma unroll 8
    for (int k4 = lane; k4 < D4; k4 += 32) {
      const float4 v = hs[k4], g = g4[k4];
      dst[k4] = pack_bf16x4(v.x * rs * g.x, v.y * rs * g.y, v.z * rs * g.z, v.w * rs * g.w);
    }
  }
  __syncthreads();

  // 2. z = n @ router_w^T: each warp a K-slice of D for up to 64 columns, then a fixed-order sum.
  const int g = lane / 4, t = lane % 4;
  const int k_per_warp = D / kWarps;
  const int kbeg = warp * k_per_warp;
  const __nv_bfloat16* arow = n_smem + (lane % 16) * ld + (lane / 16) * 8;
  for (int nb0 = 0; nb0 < R / 8; nb0 += kNBlocks) {
    const int nblocks = min(kNBlocks, R / 8 - nb0);
    float acc[kNBlocks][4];
#pragma unroll
    for (int j = 0; j < kNBlocks; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    for (int k0 = kbeg; k0 < kbeg + k_per_warp; k0 += 16) {
      uint32_t a0, a1, a2, a3;
      cute::SM75_U32x4_LDSM_N::copy(*reinterpret_cast<const cute::uint128_t*>(arow + k0), a0, a1, a2, a3);
#pragma unroll
      for (int j = 0; j < kNBlocks; ++j) {
        if (j < nblocks) {
          const __nv_bfloat16* wrow = a.router_w + size_t((nb0 + j) * 8 + g) * D + k0 + 2 * t;
          const uint32_t b0 = __ldg(reinterpret_cast<const unsigned int*>(wrow));
          const uint32_t b1 = __ldg(reinterpret_cast<const unsigned int*>(wrow + 8));
          cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(acc[j][0], acc[j][1], acc[j][2], acc[j][3], a0, a1, a2, a3, b0, b1,
                                                    acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
        }
      }
    }
    float* mine = partial + warp * kRows * kNBlocks * 8;
#pragma unroll
    for (int j = 0; j < kNBlocks; ++j) {
      const int col = j * 8 + 2 * t;
      mine[g * kNBlocks * 8 + col] = acc[j][0];
      mine[g * kNBlocks * 8 + col + 1] = acc[j][1];
      mine[(g + 8) * kNBlocks * 8 + col] = acc[j][2];
      mine[(g + 8) * kNBlocks * 8 + col + 1] = acc[j][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * nblocks * 8; i += kWarps * 32) {
      const int lr = i / (nblocks * 8), c = i % (nblocks * 8);
      float sum = 0.f;
#pragma unroll
      for (int wi = 0; wi < kWarps; ++wi) sum += partial[(wi * kRows + lr) * kNBlocks * 8 + c];
      z_smem[lr * R + nb0 * 8 + c] = sum;
    }
    __syncthreads();
  }

  // 3. Per row (a warp each): decisions, the exchange with the chosen bank, the FFN operand.
  for (int lr = warp; lr < kRows; lr += kWarps) {
    const int64_t m = row0 + lr;
    if (m >= rows) continue;
    float s = 0.f, l[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = lane; r < R; r += 32) {
      const float zr = z_smem[lr * R + r];
      s += zr * a.swap_w[r];
#pragma unroll
      for (int k = 0; k < 4; ++k) l[k] += zr * a.bank_w[r * 4 + k];
    }
    s = warp_sum(s) + a.swap_b[0];
#pragma unroll
    for (int k = 0; k < 4; ++k) l[k] = warp_sum(l[k]) + a.bank_b[k];
    int j = 0;
#pragma unroll
    for (int k = 1; k < 4; ++k)
      if (l[k] > l[j]) j = k;  // strict: ties keep the lowest index
    const bool gate = s > 0.f;
    const uint8_t map = a.stream_map[m];
    const int p = (map >> (2 * j)) & 3;
    __syncwarp();  // every lane has read the map before lane 0 rewrites it
    if (lane == 0) {
      if (gate) a.stream_map[m] = swap_lanes_0_j(map, j);
      if (uint8_t* tg = a.io->gate) {
        tg[int64_t(a.event) * rows + m] = gate ? 1 : 0;
        a.io->slot[int64_t(a.event) * rows + m] = static_cast<uint8_t>(j);
      }
    }
    float4* hs = reinterpret_cast<float4*>(h_smem + lr * D);
    if (gate) {
      uint2* bank = reinterpret_cast<uint2*>(a.ram + (size_t(m) * 4 + p) * D);
      float4* hg = reinterpret_cast<float4*>(a.h + size_t(m) * D);
#pragma unroll 8
      for (int k4 = lane; k4 < D4; k4 += 32) {
        const float4 old = hs[k4];
        const float4 in = unpack_bf16x4(bank[k4]);
        bank[k4] = pack_bf16x4(old.x, old.y, old.z, old.w);
        hs[k4] = in;
        hg[k4] = in;
      }
    }
    if (a.norm_out) {
      float ss = 0.f;
#pragma unroll 8
      for (int k4 = lane; k4 < D4; k4 += 32) {
        const float4 v = hs[k4];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      ss = warp_sum(ss);
      const float rs = rsqrtf(ss / float(D) + a.eps);
      const float4* g4 = reinterpret_cast<const float4*>(a.norm_gain);
      uint2* out = reinterpret_cast<uint2*>(a.norm_out + size_t(m) * D);
#pragma unroll 8
      for (int k4 = lane; k4 < D4; k4 += 32) {
        const float4 v = hs[k4], gg = g4[k4];
        out[k4] = pack_bf16x4(v.x * rs * gg.x, v.y * rs * gg.y, v.z * rs * gg.z, v.w * rs * gg.w);
      }
    }
  }
}

}  // namespace

void check_event_router_shape(int64_t d_model, int64_t d_router) {
  SWAPFFN_REQUIRE(d_model % 128 == 0, "event router needs d_model % 128 == 0, got " + std::to_string(d_model));
  SWAPFFN_REQUIRE(d_router % 8 == 0 && d_router <= kMaxRouter,
                  "event router needs d_router % 8 == 0 and <= 256, got " + std::to_string(d_router));
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  SWAPFFN_REQUIRE(smem_layout(d_model, d_router).total() <= size_t(optin),
                  "event router: d_model " + std::to_string(d_model) + " needs more shared memory than this GPU has");
}

void launch_event_router(const EventRouterArgs& a, cudaStream_t stream, bool pdl) {
  if (a.rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((a.rows + kRows - 1) / kRows);
  launch_kernel_ex(event_router_kernel, dim3(blocks), dim3(kWarps * 32), dim3(1, 1, 1),
                   int(smem_layout(a.d_model, a.d_router).total()), stream, pdl, a);
}

}  // namespace swapffn::cuda
