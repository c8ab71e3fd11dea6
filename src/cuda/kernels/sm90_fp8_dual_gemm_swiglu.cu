// The fp8 dual GEMM with the SwiGLU and its quantisation in the epilogue (header: why it exists).
//
// A tile is 64 rows and 256 interleaved weight rows (128 gate + 128 up rows, so 128 outputs: one whole
// 1x128 block of u per row). The kernel is persistent: one CTA per SM, in clusters of two along m,
// each cluster walking every grid-th pair of m tiles that share one n tile. The two CTAs of a cluster
// each load half of the W13 tile and multicast it to both (24 KB of L2 reads per k block instead of
// 40). Warpgroup 0 produces (one thread issues the TMA loads of x and of its half of W13, 128 e4m3 of
// k per stage, into a ring of shared-memory stages, tile after tile). Warpgroups 1 and 2 consume in
// ping-pong: each takes every other tile of the CTA whole, so one's epilogue (SiLU, block amax,
// quantisation, stores: a third of a tile's time when both worked on one tile and no wgmma ran during
// it) runs under the other's wgmmas. The ring is filled tile after tile, so the second consumer
// starts when the first is kStages stages from its tile's end (k = 1024: 8 stages, about half a
// tile) and they stay staggered. Each consumer has its own full barriers per stage: it sees only
// its own phases of them, although it skips the other's stages.
// Per stage (one 128-k block of the scales) a consumer runs the tile's two 128-column halves one
// after the other (four wgmma m64n128k32 each into one set of fresh accumulators: two sets and the
// fp32 sums would not fit the registers), waits for them and adds each block into its fp32 sums
// scaled by sa[row] * sw[gate or up block] (the recipe's order: scale the block sum, then add). The
// epilogue computes u, the row's amax over its 128 outputs (a quad shuffle), and stores the e4m3
// codes and the block's scale. Its arithmetic is the fast kind (exp2 and reciprocal approximations,
// u times 1/scale): the tensor cores' block sums already differ from the recipe's in the last bits.
#include "cuda/kernels/sm90_fp8_dual_gemm_swiglu.hpp"

#include <cuda.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/kernels/fp8_block_quantize.cuh"
#include "cuda/kernels/sm90_bf16_gemm.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kBM = 64;                  // rows per tile
constexpr int kBN = 256;                 // interleaved weight rows per tile: 128 outputs
constexpr int kBK = 128;                 // e4m3 of k per stage: one 128-byte swizzle atom, one scale block
constexpr int kStages = 5;               // as many 40 KB stages as fit
constexpr float kMinNormalFloat = 1.17549435e-38f;  // FLT_MIN, 2^-126
constexpr int kClusterM = 2;             // CTAs along m sharing (multicasting) one W13 tile
constexpr int kConsumers = 2;            // warpgroups taking every other tile (ping-pong)
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kHalves = 2;               // 128-column halves of a tile, one wgmma set each
constexpr int kHalfN = kBN / kHalves;    // interleaved columns per wgmma set
constexpr int kAcc = kHalfN / 2;         // m64n128 fp32 accumulators per thread
constexpr int kStageBytesA = kBM * kBK, kStageBytesB = kBN * kBK;
// Stages, then the full barriers [consumer][stage] and the empty ones [stage]; 1024 bytes of
// alignment slack.
constexpr int kSmemBytes = 1024 + kStages * (kStageBytesA + kStageBytesB) + (kConsumers + 1) * kStages * 8;
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

static_assert(kBN / 2 == kFp8Block, "a tile's outputs must be one whole 1x128 block of u");
static_assert(kBK == kFp8Block, "a stage must be one 128-k block of the scales");
static_assert(kBN % kClusterM == 0 && (kBN / kClusterM * kBK) % 1024 == 0,
              "each CTA's share of the W13 tile must keep the 1024-byte alignment of the 128B swizzle");
static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0 && (kHalfN * kBK) % 1024 == 0,
              "stage buffers and each half of B must keep the 1024-byte alignment of the 128B swizzle");
static_assert(kSmemBytes <= 227 * 1024, "the stages must fit the 227 KB of shared memory a CTA may opt into");
static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "the setmaxnreg targets must fit");
static_assert(kStages <= 32, "a consumer keeps its stages' full-barrier phases in the bits of one word");

using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
static_assert(kHalfN == 128, "the wgmma atom is m64n128k32");

struct Params {
  const float* x_scale;
  const float* w1_scale;
  const float* w3_scale;
  int scale_stride;
  uint8_t* u;
  float* u_scale;
  __nv_bfloat16* u_bf16;  // rows scaling
  int m, f, k_tiles, n_tiles, units;  // a unit: kClusterM m tiles (one per CTA of a cluster) of one n tile
};

__device__ __forceinline__ void fence(float (&acc)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) cute::warpgroup_fence_operand(acc[i]);
}

// silu(g) * up with exp2 and reciprocal approximations (__expf: 2 + 1.2 |g| ulp; -0 for very
// negative g, as exactly).
__device__ __forceinline__ float silu_mul(float g, float up) { return __fdividef(g, 1.f + __expf(-g)) * up; }

// The rows scaling's consumer of one unit: both halves' accumulators run over all of k (no
// promotion: the scales are one per row and per output channel), then the epilogue scales them,
// computes u and stores it in bf16 for the per-row quantisation that follows (a row's scale needs
// all of its n tiles).
__device__ __forceinline__ void consume_unit_rows(const Params& p, int unit, int j, int cy, int lane, int r0,
                                                  uint64_t* my_full, uint64_t* empty, uint32_t& phases,
                                                  uint64_t desc_a, uint64_t desc_b) {
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  const int n_tile = unit % p.n_tiles, m_tile = (unit / p.n_tiles) * kClusterM + cy;
  const auto release = [&](int s) {
    if (lane == 0)
      for (int y = 0; y < kClusterM; ++y) EmptyBarrier::arrive(&empty[s], y, 1);
  };
  float acc[kHalves][kAcc];
  for (int it = 0, i = j * p.k_tiles; it < p.k_tiles; ++it, ++i) {
    const int s = i % kStages;
    Barrier::wait(&my_full[s], (phases >> s) & 1);
    phases ^= 1u << s;
    const uint64_t da = desc_a + uint64_t(s * (kStageBytesA >> 4));
    sm90::fence_accumulators(acc);
    cute::warpgroup_arrive();
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      const uint64_t db = desc_b + uint64_t((s * kStageBytesB + half * kHalfN * kBK) >> 4);
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk)
        sm90::wgmma_call<Mma>(da + (kk * 32 >> 4), db + (kk * 32 >> 4), acc[half],
                              (it == 0 && kk == 0) ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One,
                              std::make_index_sequence<kAcc>{});
    }
    cute::warpgroup_commit_batch();
    // This stage's wgmmas stay in flight while the previous stage goes back to both CTAs.
    cute::warpgroup_wait<1>();
    sm90::fence_accumulators(acc);
    if (it > 0) release((i - 1) % kStages);
  }
  cute::warpgroup_wait<0>();
  sm90::fence_accumulators(acc);
  release((j * p.k_tiles + p.k_tiles - 1) % kStages);

  // Output group g of a half: gate block 2g and up block 2g + 1 of the accumulators, outputs
  // f0 = 128 n_tile + 64 half + 8 g + 2 (lane % 4) and f0 + 1 (entries e = 0, 1), rows r0 and r0 + 8
  // (entries 2 h + e).
  const int m0 = m_tile * kBM + r0;
  const float sx[2] = {m0 < p.m ? __ldg(p.x_scale + m0) : 0.f, m0 + 8 < p.m ? __ldg(p.x_scale + m0 + 8) : 0.f};
#pragma unroll
  for (int half = 0; half < kHalves; ++half)
#pragma unroll
    for (int g = 0; g < kAcc / 8; ++g) {
      const int f0 = n_tile * kFp8Block + half * (kHalfN / 2) + 8 * g + 2 * (lane % 4);
      const float2 sg = *reinterpret_cast<const float2*>(p.w1_scale + f0);
      const float2 su = *reinterpret_cast<const float2*>(p.w3_scale + f0);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + 8 * h;
        const int gi = 4 * (2 * g) + 2 * h, ui = 4 * (2 * g + 1) + 2 * h;
        const float u0 = silu_mul(acc[half][gi] * sx[h] * sg.x, acc[half][ui] * sx[h] * su.x);
        const float u1 = silu_mul(acc[half][gi + 1] * sx[h] * sg.y, acc[half][ui + 1] * sx[h] * su.y);
        if (m < p.m) *reinterpret_cast<__nv_bfloat162*>(p.u_bf16 + int64_t(m) * p.f + f0) = __floats2bfloat162_rn(u0, u1);
      }
    }
}

template <bool kRows>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_dual_gemm_swiglu_kernel(const __grid_constant__ CUtensorMap tma_x, const __grid_constant__ CUtensorMap tma_w,
                                     const __grid_constant__ Params p) {
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem_a + kStages * kStageBytesA;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_b + kStages * kStageBytesB);  // [consumer][stage]
  uint64_t* empty = full + kConsumers * kStages;

  const int cy = int(blockIdx.y) % kClusterM;  // this CTA's rank in its cluster
  if (threadIdx.x == 0) {
    for (int s = 0; s < kConsumers * kStages; ++s) Barrier::init(&full[s], 1);
    for (int s = 0; s < kStages; ++s)
      EmptyBarrier::init(&empty[s], kClusterM * 4);  // lane 0 of the consuming warpgroup's warps, both CTAs
    cutlass::arch::fence_barrier_init();
    cute::prefetch_tma_descriptor(&tma_x);
    cute::prefetch_tma_descriptor(&tma_w);
  }
  // Barrier inits must be visible cluster-wide before a peer multicasts or arrives.
  cute::cluster_arrive_relaxed();
  cute::cluster_wait();

  // Unit u: n tile u % n_tiles (128 outputs), m tile (u / n_tiles) * kClusterM + cy (64 rows; past
  // the last one a CTA reads zeros and writes nothing). The k iterations of all of a CTA's units run
  // through one ring: iteration i uses stage i % kStages; the CTA's j-th unit is iterations
  // [j k_tiles, (j + 1) k_tiles), consumer j % kConsumers's, signalled on that consumer's full
  // barrier of the stage (the peer CTA's multicast signals the same one: both walk the same units).
  const int unit0 = int(blockIdx.y) / kClusterM, unit_step = int(gridDim.y) / kClusterM;
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x == 0 && unit0 < p.units) {
      constexpr uint16_t kMask = (1u << kClusterM) - 1;
      constexpr int kShareRows = kBN / kClusterM, kShareBytes = kShareRows * kBK;
      const auto load_w = [&](uint64_t* bar, int s, int it, int n_tile) {
        cute::SM90_TMA_LOAD_MULTICAST_3D::copy(&tma_w, bar, kMask, 0, smem_b + s * kStageBytesB + cy * kShareBytes,
                                               it * kBK, n_tile * kBN + cy * kShareRows, 0);
      };
      // The weights of the first stage before the wait for the previous kernel (they are constant).
      Barrier::arrive_and_expect_tx(&full[0], kStageBytesA + kStageBytesB);
      load_w(&full[0], 0, 0, unit0 % p.n_tiles);
      pdl_wait();  // x is what the previous kernel of the step wrote
      int i = 0;
      for (int j = 0, unit = unit0; unit < p.units; ++j, unit += unit_step) {
        const int n_tile = unit % p.n_tiles, m_tile = (unit / p.n_tiles) * kClusterM + cy;
        for (int it = 0; it < p.k_tiles; ++it, ++i) {
          const int s = i % kStages;
          uint64_t* bar = &full[(j % kConsumers) * kStages + s];
          if (i > 0) {
            EmptyBarrier::wait(&empty[s], ((i / kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
            Barrier::arrive_and_expect_tx(bar, kStageBytesA + kStageBytesB);
            load_w(bar, s, it, n_tile);
          }
          cute::SM90_TMA_LOAD_3D::copy(&tma_x, bar, 0, smem_a + s * kStageBytesA, it * kBK, m_tile * kBM, 0);
        }
      }
    }
    // The peer may still multicast into this CTA and arrive on its barriers: leave together.
    cute::cluster_arrive();
    cute::cluster_wait();
    return;
  }

  // The scales are what the previous kernel wrote; the next kernel may start its prologue.
  pdl_wait();
  pdl_launch_dependents();
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int c = (threadIdx.x - 128) / 128, t_in = threadIdx.x % 128;
  const int warp = t_in / 32, lane = t_in % 32;
  const int r0 = warp * 16 + lane / 4;  // this thread's rows within the tile: r0 and r0 + 8
  uint64_t* my_full = full + c * kStages;
  uint32_t phases = 0;  // bit s: the parity of this consumer's next wait on its full barrier of stage s
  // Descriptors of stage 0's x tile and W13 tile; a stage, half or k step adds its byte offset / 16
  // to the start address (the low 14 bits; shared memory ends below 2^18 bytes, so no carry).
  const uint64_t desc_a = sm90::sw128_desc(smem_a), desc_b = sm90::sw128_desc(smem_b);
  if constexpr (kRows) {
    for (int j = c, unit = unit0 + c * unit_step; unit < p.units; j += kConsumers, unit += kConsumers * unit_step)
      consume_unit_rows(p, unit, j, cy, lane, r0, my_full, empty, phases, desc_a, desc_b);
    cute::cluster_arrive();
    cute::cluster_wait();
    return;
  }
  // The scales of k block it of a unit: the x scales of this thread's two rows (0 past m: a partial
  // last tile reads zeros from TMA) and the W1 and W3 scales of the tile's outputs (one block row).
  // Each block's are loaded a stage ahead, the first of a unit during the previous unit's last stage,
  // so that the promotion does not wait for them.
  struct Scales {
    float a0, a1, g, u;
  };
  const auto load_scales = [&](int unit, int it) {
    const int n_tile = unit % p.n_tiles, m0 = ((unit / p.n_tiles) * kClusterM + cy) * kBM + r0, m1 = m0 + 8;
    return Scales{m0 < p.m ? __ldg(p.x_scale + int64_t(it) * p.m + m0) : 0.f,
                  m1 < p.m ? __ldg(p.x_scale + int64_t(it) * p.m + m1) : 0.f,
                  __ldg(p.w1_scale + int64_t(n_tile) * p.scale_stride + it),
                  __ldg(p.w3_scale + int64_t(n_tile) * p.scale_stride + it)};
  };
  const int first_unit = unit0 + c * unit_step;
  Scales next = first_unit < p.units ? load_scales(first_unit, 0) : Scales{};
  for (int j = c, unit = first_unit; unit < p.units; j += kConsumers, unit += kConsumers * unit_step) {
    const int n_tile = unit % p.n_tiles, m_tile = (unit / p.n_tiles) * kClusterM + cy;
    const int m0 = m_tile * kBM + r0, m1 = m0 + 8;

    // No zero fill of acc: the first wgmma of a half overwrites it (scale-d 0); a fill would be a
    // non-wgmma definition inside the MMA pipeline (ptxas C7515). The sums start at 0.
    float acc[kAcc];
    float sum[kHalves * kAcc];
#pragma unroll
    for (int q = 0; q < kHalves * kAcc; ++q) sum[q] = 0.f;

    for (int it = 0, i = j * p.k_tiles; it < p.k_tiles; ++it, ++i) {
      const int s = i % kStages;
      const Scales sc = next;
      if (it + 1 < p.k_tiles)
        next = load_scales(unit, it + 1);
      else if (unit + kConsumers * unit_step < p.units)
        next = load_scales(unit + kConsumers * unit_step, 0);
      Barrier::wait(&my_full[s], (phases >> s) & 1);
      phases ^= 1u << s;
      const uint64_t da = desc_a + uint64_t(s * (kStageBytesA >> 4));
      const float g0 = sc.a0 * sc.g, g1 = sc.a1 * sc.g, u0 = sc.a0 * sc.u, u1 = sc.a1 * sc.u;
#pragma unroll
      for (int half = 0; half < kHalves; ++half) {
        const uint64_t db = desc_b + uint64_t((s * kStageBytesB + half * kHalfN * kBK) >> 4);
        fence(acc);
        cute::warpgroup_arrive();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk)
          sm90::wgmma_call<Mma>(da + (kk * 32 >> 4), db + (kk * 32 >> 4), acc,
                                kk == 0 ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One,
                                std::make_index_sequence<kAcc>{});
        cute::warpgroup_commit_batch();
        cute::warpgroup_wait<0>();
        fence(acc);
        if (half == kHalves - 1 && lane == 0)  // the stage back to both CTAs: each multicasts into it
          for (int y = 0; y < kClusterM; ++y) EmptyBarrier::arrive(&empty[s], y, 1);
        // 8-column block q of the accumulators: gate values when q is even, up values when odd (the
        // interleave); its entries 0-1 are row r0, 2-3 row r0 + 8.
        float* hs = sum + half * kAcc;
#pragma unroll
        for (int q = 0; q < kAcc / 4; ++q) {
          const float lo = (q & 1) ? u0 : g0, hi = (q & 1) ? u1 : g1;
          hs[4 * q + 0] = fmaf(lo, acc[4 * q + 0], hs[4 * q + 0]);
          hs[4 * q + 1] = fmaf(lo, acc[4 * q + 1], hs[4 * q + 1]);
          hs[4 * q + 2] = fmaf(hi, acc[4 * q + 2], hs[4 * q + 2]);
          hs[4 * q + 3] = fmaf(hi, acc[4 * q + 3], hs[4 * q + 3]);
        }
      }
    }

    // u of output group g (8 outputs: the gate block 2g and the up block 2g + 1 of a half), row half
    // h (r0, r0 + 8), column e of the thread's pair, written over the gate's sum; the half's outputs
    // are [64 half, 64 half + 64) of the tile's 128.
    float amax[2] = {0.f, 0.f};
#pragma unroll
    for (int half = 0; half < kHalves; ++half)
#pragma unroll
      for (int g = 0; g < kAcc / 8; ++g)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& v = sum[half * kAcc + 4 * (2 * g) + 2 * h + e];
            v = silu_mul(v, sum[half * kAcc + 4 * (2 * g + 1) + 2 * h + e]);
            amax[h] = fmaxf(amax[h], fabsf(v));
          }
    // The row's 128 outputs lie in the quad of lanes sharing lane / 4.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));
    }
    const int col0 = n_tile * kFp8Block + 2 * (lane % 4);  // the output of group 0, column 0
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = h ? m1 : m0;
      const float q = __fdiv_rn(amax[h], kE4m3Max), scale = q > 0.f ? q : 1.f;  // fp8::block_scale
      // Below 2^-126 the reciprocal leaves fp32's range (inf, then NaN codes): such a block divides.
      const bool divide = scale < kMinNormalFloat;
      const float inv = divide ? 0.f : __frcp_rn(scale);
      const auto code_of = [&](float v) { return divide ? __fdiv_rn(v, scale) : v * inv; };
      if (m >= p.m) continue;
      uint8_t* row = p.u + int64_t(m) * p.f + col0;
#pragma unroll
      for (int half = 0; half < kHalves; ++half)
#pragma unroll
        for (int g = 0; g < kAcc / 8; ++g) {
          const float* v = sum + half * kAcc + 4 * (2 * g) + 2 * h;
          const __nv_fp8x2_storage_t codes =
              __nv_cvt_float2_to_fp8x2(make_float2(code_of(v[0]), code_of(v[1])), __NV_SATFINITE, __NV_E4M3);
          *reinterpret_cast<__nv_fp8x2_storage_t*>(row + half * (kHalfN / 2) + 8 * g) = codes;
        }
      if (lane % 4 == 0) p.u_scale[int64_t(n_tile) * p.m + m] = scale;
    }
  }
  cute::cluster_arrive();
  cute::cluster_wait();
}

}  // namespace

void launch_fp8_dual_gemm_swiglu(const Fp8DualGemmSwigluArgs& a, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.m > 0 && a.f > 0 && a.f % kFp8Block == 0 && a.k > 0 && a.k % kBK == 0,
                  "fp8 dual GEMM: m = " + std::to_string(a.m) + ", f = " + std::to_string(a.f) + ", k = " +
                      std::to_string(a.k) + " (f and k must be positive multiples of 128)");
  const bool rows = a.scaling == fp8::Scaling::rows;
  SWAPFFN_ASSERT(rows ? a.u_bf16 != nullptr : a.u != nullptr && a.u_scale != nullptr,
                 "fp8 dual GEMM: the rows scaling writes u_bf16, the blocks scaling u and u_scale");
  const uint64_t k = uint64_t(a.k), m = uint64_t(a.m), n2 = 2 * uint64_t(a.f);
  const CUtensorMap tx = make_tma_3d_u8(a.x, k, m, 1, k, k * m, kBK, kBM, /*swizzle_128b=*/true);
  const CUtensorMap tw = make_tma_3d_u8(a.w13, k, n2, 1, k, k * n2, kBK, kBN / kClusterM, /*swizzle_128b=*/true);
  const int n_tiles = int(n2 / kBN), m_units = ((a.m + kBM - 1) / kBM + kClusterM - 1) / kClusterM;
  const Params p{a.x_scale, a.w1_scale, a.w3_scale, a.scale_stride, a.u,         a.u_scale,
                 a.u_bf16,    a.m,        a.f,        a.k / kBK,      n_tiles, n_tiles * m_units};
  const auto kernel = rows ? sm90_fp8_dual_gemm_swiglu_kernel<true> : sm90_fp8_dual_gemm_swiglu_kernel<false>;
  // As many clusters as are resident at once (one CTA per SM: the stages take most of its shared
  // memory), each walking every grid-th unit. The occupancy query is kept per device.
  static std::atomic<int> resident_on[2][kMaxDevices] = {};
  const int resident = once_per_device(resident_on[rows], [kernel] {
    const int n = max_active_clusters(kernel, dim3(kThreads), dim3(1, kClusterM, 1), kSmemBytes);
    SWAPFFN_REQUIRE(n > 0, "fp8 dual GEMM: no cluster of " + std::to_string(kClusterM) + " CTAs fits the GPU");
    return n;
  });
  const unsigned clusters = static_cast<unsigned>(std::min(p.units, resident));
  launch_kernel_ex(kernel, dim3(1, clusters * kClusterM, 1), dim3(kThreads),
                   dim3(1, kClusterM, 1), kSmemBytes, stream, /*pdl=*/true, tx, tw, p);
}

std::vector<uint8_t> interleave_w13_e4m3(const std::vector<uint8_t>& w1, const std::vector<uint8_t>& w3, int64_t f,
                                         int64_t k) {
  SWAPFFN_REQUIRE(f % 8 == 0, "d_ff = " + std::to_string(f) + " must be a multiple of 8 to interleave w1/w3");
  SWAPFFN_REQUIRE(w1.size() == size_t(f * k) && w3.size() == size_t(f * k), "w1/w3 sizes do not match [F, K]");
  std::vector<uint8_t> out(size_t(2 * f * k));
  for (int64_t r = 0; r < f; ++r) {
    const int64_t dst = (r / 8) * 16 + r % 8;
    std::copy_n(&w1[size_t(r * k)], k, &out[size_t(dst * k)]);
    std::copy_n(&w3[size_t(r * k)], k, &out[size_t((dst + 8) * k)]);
  }
  return out;
}

}  // namespace swapffn::cuda
