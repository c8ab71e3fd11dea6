// The rows-scaled e4m3 GEMM with the fp32 residual (header: what it computes and why it exists).
// Persistent: a CTA per SM walks the output tiles (row block major). Warpgroup 0 produces (one thread
// issues TMA loads of 128 of k per stage into a ring of about 192 KB, W's first stage before the wait
// for the previous kernel), warpgroups 1 and 2 consume every stage: at 64 x 64 each takes 32 of the
// columns (both read the stage's A), at 128 x 128 and 128 x 256 each takes 64 of the rows. The
// epilogue writes h + (acc * sa) * sw: one fp32 rounding per operation in that order.
#include "cuda/kernels/sm90_fp8_rows_gemm_residual.hpp"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

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

constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBK = 128;                // e4m3 of k per stage: one 128-byte swizzle atom per row
constexpr int kRingBytes = 192 * 1024;  // stages in flight, as deep as cuBLASLt's kernels keep

template <int N>
struct E4m3Atom;
template <>
struct E4m3Atom<32> {
  using Op = cute::SM90::GMMA::MMA_64x32x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct E4m3Atom<128> {
  using Op = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct E4m3Atom<256> {
  using Op = cute::SM90::GMMA::MMA_64x256x32_F32E4M3E4M3_SS_TN<>;
};

template <int BM, int BN>
struct Tile {
  static_assert((BM == 64 && BN == 64) || (BM == 128 && (BN == 128 || BN == 256)),
                "compiled tiles: 64 x 64, 128 x 128 and 128 x 256");
  static constexpr bool kSplitCols = BM == 64;               // consumers split the columns (else the rows)
  static constexpr int kWN = kSplitCols ? BN / 2 : BN;       // a consumer's columns
  static constexpr int kAcc = kWN / 2;                       // m64 x kWN fp32 accumulators per thread
  static constexpr int kStageA = BM * kBK, kStageB = BN * kBK, kStageBytes = kStageA + kStageB;
  static constexpr int kStages = kRingBytes / kStageBytes;
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;
  using Mma = typename E4m3Atom<kWN>::Op;
  static_assert(kStages >= 2, "at least two stages");
  static_assert(kSmemBytes <= 227 * 1024, "the ring must fit 227 KB of shared memory");
  static_assert(kStageA % 1024 == 0 && kStageB % 1024 == 0 && (kWN * kBK) % 1024 == 0 && (64 * kBK) % 1024 == 0,
                "stages and each consumer's slice must keep the 1024-byte alignment of the 128-byte swizzle");
  static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= 65536,
                "the setmaxnreg targets must fit the register file");
};

struct Params {
  const float* a_scale;
  const float* w_scale;
  float* h;
  int m, n, k_steps, n_tiles, tiles;
  bool residual;
};

template <int N>
__device__ __forceinline__ void fence(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(acc[i]);
}

template <int BM, int BN>
__global__ void __launch_bounds__(kThreads, 1)
    sm90_fp8_rows_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_w,
                              const __grid_constant__ Params p) {
  using T = Tile<BM, BN>;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;
  constexpr int S = T::kStages;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * T::kStageBytes);
  uint64_t* empty = full + S;
  const auto stage = [&](int s) { return smem + s * T::kStageBytes; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      Barrier::init(&full[s], 1);
      EmptyBarrier::init(&empty[s], 2 * 4);  // lane 0 of each consumer warp
    }
    cutlass::arch::fence_barrier_init();
    cute::prefetch_tma_descriptor(&tma_a);
    cute::prefetch_tma_descriptor(&tma_w);
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x != 0 || static_cast<int>(blockIdx.x) >= p.tiles) return;
    const auto load_w = [&](int s, int it, int n_tile) {
      cute::SM90_TMA_LOAD_3D::copy(&tma_w, &full[s], 0, stage(s) + T::kStageA, it * kBK, n_tile * BN, 0);
    };
    // W's first stage before the wait for the previous kernel (the weights are constant).
    Barrier::arrive_and_expect_tx(&full[0], T::kStageBytes);
    load_w(0, 0, static_cast<int>(blockIdx.x) % p.n_tiles);
    pdl_wait();  // a is what the previous kernel of the step wrote
    int g = 0;   // k-steps issued so far: the ring's position runs on across tiles
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
      const int n_tile = tile % p.n_tiles, m_tile = tile / p.n_tiles;
      for (int it = 0; it < p.k_steps; ++it, ++g) {
        const int s = g % S;
        if (g > 0) {
          EmptyBarrier::wait(&empty[s], ((g / S) & 1) ^ 1);  // a fresh barrier passes parity 1
          Barrier::arrive_and_expect_tx(&full[s], T::kStageBytes);
          load_w(s, it, n_tile);
        }
        cute::SM90_TMA_LOAD_3D::copy(&tma_a, &full[s], 0, stage(s), it * kBK, m_tile * BM, 0);
      }
    }
    return;
  }

  // Consumers. The scales and h are what the previous kernels wrote.
  pdl_wait();
  pdl_launch_dependents();
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int c = (threadIdx.x - 128) / 128, t = threadIdx.x % 128;
  const int a_off = T::kSplitCols ? 0 : c * 64 * kBK, b_off = T::kStageA + (T::kSplitCols ? c * T::kWN * kBK : 0);
  const sm90::AccCoord a0 = sm90::acc_coord(t, 0);
  int g = 0;
  for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const int n_tile = tile % p.n_tiles, m_tile = tile / p.n_tiles;
    float acc[T::kAcc];
    for (int it = 0; it < p.k_steps; ++it, ++g) {
      const int s = g % S;
      Barrier::wait(&full[s], (g / S) & 1);
      const uint8_t* a = stage(s) + a_off;
      const uint8_t* b = stage(s) + b_off;
      fence(acc);
      cute::warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < kBK / 32; ++kk)
        sm90::wgmma_call<typename T::Mma>(sm90::sw128_desc(a + kk * 32), sm90::sw128_desc(b + kk * 32), acc,
                                          (it == 0 && kk == 0) ? cute::SM90::GMMA::ScaleOut::Zero
                                                               : cute::SM90::GMMA::ScaleOut::One,
                                          std::make_index_sequence<T::kAcc>{});
      cute::warpgroup_commit_batch();
      cute::warpgroup_wait<1>();  // this stage's wgmmas stay in flight while the previous stage goes back
      fence(acc);
      if (it > 0 && t % 32 == 0) EmptyBarrier::arrive(&empty[(g + S - 1) % S]);
    }
    cute::warpgroup_wait<0>();
    fence(acc);
    if (t % 32 == 0) EmptyBarrier::arrive(&empty[(g + S - 1) % S]);

    // Entry 4 j + 2 half + e: row row0 + 8 half, column col0 + 8 j + e. h is loaded 64 columns at a
    // time before they are stored: loads interleaved with the stores would each wait for the store
    // before it (h is written through the same pointer), a chain of round trips.
    const int row0 = m_tile * BM + (T::kSplitCols ? 0 : c * 64) + a0.row;
    const int col0 = n_tile * BN + (T::kSplitCols ? c * T::kWN : 0) + a0.col;
    float sa[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) sa[half] = row0 + 8 * half < p.m ? __ldg(p.a_scale + row0 + 8 * half) : 0.f;
    constexpr int kJ = T::kWN / 8, kChunk = kJ < 8 ? kJ : 8;
#pragma unroll
    for (int j0 = 0; j0 < kJ; j0 += kChunk) {
      float2 hv[kChunk][2];
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = row0 + 8 * half;
          hv[j][half] = p.residual && row < p.m
                            ? *reinterpret_cast<const float2*>(p.h + int64_t(row) * p.n + col0 + 8 * (j0 + j))
                            : make_float2(0.f, 0.f);
        }
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float2 sw = __ldg(reinterpret_cast<const float2*>(p.w_scale + col0 + 8 * (j0 + j)));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = row0 + 8 * half;
          if (row >= p.m) continue;  // the last row block's rows past m (a read them as zeros)
          const int e = 4 * (j0 + j) + 2 * half;
          const float v0 = acc[e] * sa[half] * sw.x, v1 = acc[e + 1] * sa[half] * sw.y;
          const float2 h = hv[j][half];
          *reinterpret_cast<float2*>(p.h + int64_t(row) * p.n + col0 + 8 * (j0 + j)) =
              p.residual ? make_float2(h.x + v0, h.y + v1) : make_float2(v0, v1);
        }
      }
    }
  }
}

template <int BM, int BN>
void launch_tile(const Fp8RowsGemmArgs& a, cudaStream_t stream) {
  using T = Tile<BM, BN>;
  const uint64_t k = uint64_t(a.k), m = uint64_t(a.m), n = uint64_t(a.n);
  const CUtensorMap ta = make_tma_3d_u8(a.a, k, m, 1, k, k * m, kBK, BM, /*swizzle_128b=*/true);
  const CUtensorMap tw = make_tma_3d_u8(a.w, k, n, 1, k, k * n, kBK, BN, /*swizzle_128b=*/true);
  Params p{};
  p.a_scale = a.a_scale, p.w_scale = a.w_scale, p.h = a.h;
  p.m = a.m, p.n = a.n, p.k_steps = a.k / kBK, p.n_tiles = a.n / BN;
  p.tiles = (a.m + BM - 1) / BM * p.n_tiles;
  p.residual = a.residual;
  // At most one CTA per SM (the ring takes the shared memory), each walking every grid-th tile.
  const int grid = std::min(p.tiles, sm_count());
  launch_kernel_ex(sm90_fp8_rows_gemm_kernel<BM, BN>, dim3(grid), dim3(kThreads), dim3(1, 1, 1), T::kSmemBytes, stream,
                   /*pdl=*/true, ta, tw, p);
}

}  // namespace

Fp8RowsTile fp8_rows_gemm_tile(int64_t m, int64_t n, int sms) {
  // Each round of tiles over the SMs costs about what an SM loads, (BM + BN) * k: the fewest rounds
  // of the smallest tiles that fill them.
  const auto cost = [&](int bm, int bn) {
    return n % bn != 0 ? INT64_MAX : ((m + bm - 1) / bm * (n / bn) + sms - 1) / sms * (bm + bn);
  };
  Fp8RowsTile best = Fp8RowsTile::m64n64;
  int64_t best_cost = cost(64, 64);
  for (const auto& [tile, bm, bn] : {std::tuple{Fp8RowsTile::m128n128, 128, 128}, {Fp8RowsTile::m128n256, 128, 256}})
    if (const int64_t c = cost(bm, bn); c < best_cost) best = tile, best_cost = c;
  return best;
}

void launch_fp8_rows_gemm(const Fp8RowsGemmArgs& a, Fp8RowsTile tile, cudaStream_t stream) {
  SWAPFFN_REQUIRE(a.m > 0 && a.n > 0 && a.n % 64 == 0 && a.k > 0 && a.k % kBK == 0,
                  "fp8 rows GEMM: m = " + std::to_string(a.m) + ", n = " + std::to_string(a.n) + ", k = " +
                      std::to_string(a.k) + " (n must be a positive multiple of 64, k of 128)");
  const int bn = tile == Fp8RowsTile::m64n64 ? 64 : tile == Fp8RowsTile::m128n128 ? 128 : 256;
  SWAPFFN_REQUIRE(a.n % bn == 0, "fp8 rows GEMM: a tile " + std::to_string(bn) + " wide needs n % " +
                                     std::to_string(bn) + " == 0, got n = " + std::to_string(a.n));
  SWAPFFN_REQUIRE(a.a && a.a_scale && a.w && a.w_scale && a.h, "fp8 rows GEMM: an operand pointer is null");
  if (tile == Fp8RowsTile::m64n64)
    launch_tile<64, 64>(a, stream);
  else if (tile == Fp8RowsTile::m128n128)
    launch_tile<128, 128>(a, stream);
  else
    launch_tile<128, 256>(a, stream);
}

}  // namespace swapffn::cuda
