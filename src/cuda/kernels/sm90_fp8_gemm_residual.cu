// The fp8 GEMM into the fp32 residual (header: why it exists).
//
// The structure is the dual GEMM's (sm90_fp8_dual_gemm_swiglu.cu): persistent CTAs in clusters of two
// along m, the two CTAs of a cluster each loading half of the W tile and multicasting it to both;
// warpgroup 0 produces (one thread issues the TMA loads into a ring of shared-memory stages, 128 e4m3
// of k per stage, tile after tile); warpgroups 1 and 2 consume in ping-pong, each taking every other
// tile of the CTA whole, so one's epilogue runs under the other's wgmmas. A tile is 64 rows by
// kHalves column halves of kHalfN; per stage (one 128-k block of the scales) a consumer runs the
// halves one after the other into one set of fresh accumulators and adds each into its fp32 sums
// scaled by sa[row] * sw[block] (the recipe's order: scale the block sum, then add). The epilogue
// adds the sums into out (or stores them). W is constant, so the producer loads the W part of the
// ring's first stages before it waits for the previous kernel: with k = 4096 at B = 1 most of the
// bytes a CTA reads are W's, and those of the first stages then arrive under that kernel's tail.
#include "cuda/kernels/sm90_fp8_gemm_residual.hpp"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <type_traits>
#include <utility>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/kernels/sm90_bf16_gemm.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda {
namespace {

constexpr int kBM = 64;         // rows per tile: one wgmma m64 per consumer
constexpr int kBK = 128;        // e4m3 of k per stage: one 128-byte swizzle atom, one scale block
constexpr int kScaleBlock = 128;
constexpr int kClusterM = 2;    // CTAs along m sharing (multicasting) one W tile
constexpr int kConsumers = 2;   // warpgroups taking every other tile (ping-pong)
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

template <int HalfN, int Halves, int Stages>
struct Tile {
  static constexpr int kHalfN = HalfN;    // columns per wgmma set
  static constexpr int kHalves = Halves;  // wgmma sets per stage, one after the other
  static constexpr int kStages = Stages;
  static constexpr int kBN = kHalfN * kHalves;
  static constexpr int kAcc = kHalfN / 2;  // m64nHalfN fp32 accumulators per thread
  static constexpr int kStageBytesA = kBM * kBK, kStageBytesB = kBN * kBK;
  // Stages, then the full barriers [consumer][stage] and the empty ones [stage]; 1024 bytes of
  // alignment slack.
  static constexpr int kSmemBytes =
      1024 + kStages * (kStageBytesA + kStageBytesB) + (kConsumers + 1) * kStages * 8;
  using Mma = std::conditional_t<kHalfN == 64, cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_SS_TN<>,
                                 cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>>;

  static_assert(kHalfN == 64 || kHalfN == 128, "a half is one m64n64k32 or m64n128k32 wgmma");
  static_assert(kScaleBlock % kHalfN == 0, "a half must lie inside one 128-column block of W's scales");
  static_assert(kBK == kScaleBlock, "a stage must be one 128-k block of the scales");
  static_assert((kBN / kClusterM * kBK) % 1024 == 0 && (kHalfN * kBK) % 1024 == 0 && kStageBytesA % 1024 == 0,
                "each CTA's share of W, each half and the stages must keep the 128B swizzle's 1024-byte alignment");
  static_assert(kSmemBytes <= 227 * 1024, "the stages must fit the 227 KB of shared memory a CTA may opt into");
  static_assert(kStages <= 32, "a consumer keeps its stages' full-barrier phases in the bits of one word");
  static_assert(kHalves * kAcc + kAcc <= 192, "the sums and one accumulator set must fit the consumers' registers");
};
// 16 KB stages: 12 keep ~190 KB of a CTA's reads in flight (the short, byte-bound wave at B = 1).
using TileN64 = Tile<64, 1, 12>;
// 40 KB stages: as many as fit.
using TileN256 = Tile<128, 2, 5>;
static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "the setmaxnreg targets must fit");

struct Params {
  const float* a_scale;
  const float* w_scale;
  int scale_stride;
  float* out;
  int accumulate;
  int m, n, k_tiles, n_tiles, units;  // a unit: kClusterM m tiles (one per CTA of a cluster) of one n tile
};

template <int N>
__device__ __forceinline__ void fence(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(acc[i]);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_gemm_residual_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_w,
                                  const __grid_constant__ Params p) {
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  constexpr int kStages = T::kStages, kAcc = T::kAcc, kStageBytes = T::kStageBytesA + T::kStageBytesB;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem_a + kStages * T::kStageBytesA;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_b + kStages * T::kStageBytesB);  // [consumer][stage]
  uint64_t* empty = full + kConsumers * kStages;

  const int cy = int(blockIdx.y) % kClusterM;  // this CTA's rank in its cluster
  if (threadIdx.x == 0) {
    for (int s = 0; s < kConsumers * kStages; ++s) Barrier::init(&full[s], 1);
    for (int s = 0; s < kStages; ++s)
      EmptyBarrier::init(&empty[s], kClusterM * 4);  // lane 0 of the consuming warpgroup's warps, both CTAs
    cutlass::arch::fence_barrier_init();
    cute::prefetch_tma_descriptor(&tma_a);
    cute::prefetch_tma_descriptor(&tma_w);
  }
  // Barrier inits must be visible cluster-wide before a peer multicasts or arrives.
  cute::cluster_arrive_relaxed();
  cute::cluster_wait();

  // Unit u: n tile u % n_tiles, m tile (u / n_tiles) * kClusterM + cy (past the last one a CTA reads
  // zeros and writes nothing). All of a CTA's k iterations run through one ring: iteration i uses
  // stage i % kStages; the CTA's j-th unit is iterations [j k_tiles, (j + 1) k_tiles), consumer
  // j % kConsumers's, signalled on that consumer's full barrier of the stage.
  const int unit0 = int(blockIdx.y) / kClusterM, unit_step = int(gridDim.y) / kClusterM;
  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x == 0 && unit0 < p.units) {
      constexpr uint16_t kMask = (1u << kClusterM) - 1;
      constexpr int kShareRows = T::kBN / kClusterM, kShareBytes = kShareRows * kBK;
      const auto load_w = [&](uint64_t* bar, int s, int it, int n_tile) {
        cute::SM90_TMA_LOAD_MULTICAST_3D::copy(&tma_w, bar, kMask, 0, smem_b + s * T::kStageBytesB + cy * kShareBytes,
                                               it * kBK, n_tile * T::kBN + cy * kShareRows, 0);
      };
      // The first unit's first stages of W before the wait for the previous kernel.
      const int ahead = p.k_tiles < kStages ? p.k_tiles : kStages;
      for (int s = 0; s < ahead; ++s) {
        Barrier::arrive_and_expect_tx(&full[s], kStageBytes);
        load_w(&full[s], s, s, unit0 % p.n_tiles);
      }
      pdl_wait();  // a is what the previous kernel of the step wrote
      int i = 0;
      for (int j = 0, unit = unit0; unit < p.units; ++j, unit += unit_step) {
        const int n_tile = unit % p.n_tiles, m_tile = (unit / p.n_tiles) * kClusterM + cy;
        for (int it = 0; it < p.k_tiles; ++it, ++i) {
          const int s = i % kStages;
          uint64_t* bar = &full[(j % kConsumers) * kStages + s];
          if (i >= ahead) {
            EmptyBarrier::wait(&empty[s], ((i / kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
            Barrier::arrive_and_expect_tx(bar, kStageBytes);
            load_w(bar, s, it, n_tile);
          }
          cute::SM90_TMA_LOAD_3D::copy(&tma_a, bar, 0, smem_a + s * T::kStageBytesA, it * kBK, m_tile * kBM, 0);
        }
      }
    }
    // The peer may still multicast into this CTA and arrive on its barriers: leave together.
    cute::cluster_arrive();
    cute::cluster_wait();
    return;
  }

  // The scales and out are the previous kernels'; the next kernel may start its prologue.
  pdl_wait();
  pdl_launch_dependents();
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int c = (threadIdx.x - 128) / 128, t_in = threadIdx.x % 128;
  const int warp = t_in / 32, lane = t_in % 32;
  const int r0 = warp * 16 + lane / 4;  // this thread's rows within the tile: r0 and r0 + 8
  uint64_t* my_full = full + c * kStages;
  uint32_t phases = 0;  // bit s: the parity of this consumer's next wait on its full barrier of stage s
  // Descriptors of stage 0's a tile and W tile; a stage, half or k step adds its byte offset / 16 to
  // the start address (the low 14 bits; shared memory ends below 2^18 bytes, so no carry).
  const uint64_t desc_a = sm90::sw128_desc(smem_a), desc_b = sm90::sw128_desc(smem_b);
  // The scales of k block it of a unit: those of this thread's two rows (0 past m: a partial last
  // tile reads zeros from TMA) and W's of each half's 128-column block (0 past n). Each block's are
  // loaded a stage ahead, the first of a unit during the previous unit's last stage.
  struct Scales {
    float a0, a1, w[T::kHalves];
  };
  const auto load_scales = [&](int unit, int it) {
    const int n_tile = unit % p.n_tiles, m0 = ((unit / p.n_tiles) * kClusterM + cy) * kBM + r0, m1 = m0 + 8;
    Scales sc{m0 < p.m ? __ldg(p.a_scale + int64_t(it) * p.m + m0) : 0.f,
              m1 < p.m ? __ldg(p.a_scale + int64_t(it) * p.m + m1) : 0.f,
              {}};
#pragma unroll
    for (int half = 0; half < T::kHalves; ++half) {
      const int col = n_tile * T::kBN + half * T::kHalfN;
      sc.w[half] = col < p.n ? __ldg(p.w_scale + int64_t(col / kScaleBlock) * p.scale_stride + it) : 0.f;
    }
    return sc;
  };
  const int first_unit = unit0 + c * unit_step;
  Scales next = first_unit < p.units ? load_scales(first_unit, 0) : Scales{};
  for (int j = c, unit = first_unit; unit < p.units; j += kConsumers, unit += kConsumers * unit_step) {
    const int n_tile = unit % p.n_tiles, m_tile = (unit / p.n_tiles) * kClusterM + cy;

    // No zero fill of acc: the first wgmma of a half overwrites it (scale-d 0); a fill would be a
    // non-wgmma definition inside the MMA pipeline (ptxas C7515). The sums start at 0.
    float acc[kAcc];
    float sum[T::kHalves * kAcc];
#pragma unroll
    for (int q = 0; q < T::kHalves * kAcc; ++q) sum[q] = 0.f;

    for (int it = 0, i = j * p.k_tiles; it < p.k_tiles; ++it, ++i) {
      const int s = i % kStages;
      const Scales sc = next;
      if (it + 1 < p.k_tiles)
        next = load_scales(unit, it + 1);
      else if (unit + kConsumers * unit_step < p.units)
        next = load_scales(unit + kConsumers * unit_step, 0);
      Barrier::wait(&my_full[s], (phases >> s) & 1);
      phases ^= 1u << s;
      const uint64_t da = desc_a + uint64_t(s * (T::kStageBytesA >> 4));
#pragma unroll
      for (int half = 0; half < T::kHalves; ++half) {
        const uint64_t db = desc_b + uint64_t((s * T::kStageBytesB + half * T::kHalfN * kBK) >> 4);
        fence(acc);
        cute::warpgroup_arrive();
#pragma unroll
        for (int kk = 0; kk < kBK / 32; ++kk)
          sm90::wgmma_call<typename T::Mma>(da + (kk * 32 >> 4), db + (kk * 32 >> 4), acc,
                                            kk == 0 ? cute::SM90::GMMA::ScaleOut::Zero
                                                    : cute::SM90::GMMA::ScaleOut::One,
                                            std::make_index_sequence<kAcc>{});
        cute::warpgroup_commit_batch();
        cute::warpgroup_wait<0>();
        fence(acc);
        if (half == T::kHalves - 1 && lane == 0)  // the stage back to both CTAs: each multicasts into it
          for (int y = 0; y < kClusterM; ++y) EmptyBarrier::arrive(&empty[s], y, 1);
        // 8-column block q of the accumulators: entries 0-1 are row r0, 2-3 row r0 + 8.
        const float s0 = sc.a0 * sc.w[half], s1 = sc.a1 * sc.w[half];
        float* hs = sum + half * kAcc;
#pragma unroll
        for (int q = 0; q < kAcc / 4; ++q) {
          hs[4 * q + 0] = fmaf(s0, acc[4 * q + 0], hs[4 * q + 0]);
          hs[4 * q + 1] = fmaf(s0, acc[4 * q + 1], hs[4 * q + 1]);
          hs[4 * q + 2] = fmaf(s1, acc[4 * q + 2], hs[4 * q + 2]);
          hs[4 * q + 3] = fmaf(s1, acc[4 * q + 3], hs[4 * q + 3]);
        }
      }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m_tile * kBM + r0 + 8 * h;
      if (m >= p.m) continue;
      float* row = p.out + int64_t(m) * p.n;
#pragma unroll
      for (int half = 0; half < T::kHalves; ++half) {
        const int col0 = n_tile * T::kBN + half * T::kHalfN + 2 * (lane % 4);
        if (col0 >= p.n) continue;
#pragma unroll
        for (int q = 0; q < kAcc / 4; ++q) {
          float2* dst = reinterpret_cast<float2*>(row + col0 + 8 * q);
          float2 v = make_float2(sum[half * kAcc + 4 * q + 2 * h], sum[half * kAcc + 4 * q + 2 * h + 1]);
          if (p.accumulate) {
            const float2 old = *dst;
            v = make_float2(old.x + v.x, old.y + v.y);
          }
          *dst = v;
        }
      }
    }
  }
  cute::cluster_arrive();
  cute::cluster_wait();
}

template <class T>
void launch(const Fp8GemmResidualArgs& a, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.m > 0 && a.n > 0 && a.n % T::kHalfN == 0 && a.k > 0 && a.k % kBK == 0,
                  "fp8 GEMM: m = " + std::to_string(a.m) + ", n = " + std::to_string(a.n) + ", k = " +
                      std::to_string(a.k) + " (n must be a positive multiple of " + std::to_string(T::kHalfN) +
                      " for this tile, k of 128)");
  const uint64_t k = uint64_t(a.k), m = uint64_t(a.m), n = uint64_t(a.n);
  const CUtensorMap ta = make_tma_3d_u8(a.a, k, m, 1, k, k * m, kBK, kBM, /*swizzle_128b=*/true);
  const CUtensorMap tw = make_tma_3d_u8(a.w, k, n, 1, k, k * n, kBK, T::kBN / kClusterM, /*swizzle_128b=*/true);
  const int n_tiles = (a.n + T::kBN - 1) / T::kBN, m_units = ((a.m + kBM - 1) / kBM + kClusterM - 1) / kClusterM;
  const Params p{a.a_scale, a.w_scale, a.scale_stride, a.out, a.accumulate ? 1 : 0, a.m, a.n, a.k / kBK, n_tiles,
                 n_tiles * m_units};
  // As many clusters as are resident at once (one CTA per SM), each walking every grid-th unit. The
  // occupancy query is kept per device and tile.
  static std::atomic<int> resident_on[kMaxDevices] = {};
  const int resident = once_per_device(resident_on, [] {
    const int r = max_active_clusters(sm90_fp8_gemm_residual_kernel<T>, dim3(kThreads), dim3(1, kClusterM, 1),
                                      T::kSmemBytes);
    SWAPFFN_REQUIRE(r > 0, "fp8 GEMM: no cluster of " + std::to_string(kClusterM) + " CTAs fits the GPU");
    return r;
  });
  const unsigned clusters = static_cast<unsigned>(std::min(p.units, resident));
  launch_kernel_ex(sm90_fp8_gemm_residual_kernel<T>, dim3(1, clusters * kClusterM, 1), dim3(kThreads),
                   dim3(1, kClusterM, 1), T::kSmemBytes, stream, /*pdl=*/true, ta, tw, p);
}

}  // namespace

void launch_fp8_gemm_residual(const Fp8GemmResidualArgs& a, Fp8GemmTile tile, cudaStream_t stream) {
  if (tile == Fp8GemmTile::m64n64)
    launch<TileN64>(a, stream);
  else
    launch<TileN256>(a, stream);
}

}  // namespace swapffn::cuda
