// A warp-specialised Hopper GEMM mainloop, D[M,N] = A[M,K] * B[N,K]^T with bf16 operands (both
// K-major) and fp32 accumulators, parameterised by an epilogue. It exists because the Swap-FFN
// GEMMs need epilogues that cuBLAS cannot fuse (SwiGLU of interleaved gate/up columns; residual add
// into the fp32 state with a split-K reduction that is deterministic) and because the same tile of
// weights must serve 128 core rows at once (the lesson of the seed's one-block-per-core kernel).
//
// Structure (per CTA, 384 threads): warpgroup 0 is the producer (one thread issues TMA loads of the
// A and B tiles into a ring of `Stages` shared-memory buffers, completing on mbarriers); warpgroups
// 1 and 2 are consumers, each owning 64 rows of the 128-row tile and issuing wgmma m64nBNk16 on the
// swizzled tiles (64-row tiles: 256 threads, one consumer warpgroup; 256-row tiles: two consumers of
// 128 rows, each issuing two m64 MMAs per k16 step). Split-K (blockIdx.z, 2 or 4
// slices of K) runs as a thread-block cluster along z. After the mainloops each rank owns 1/SplitK
// of the tile's columns and receives the other ranks' partial sums of those columns through
// distributed shared memory (into its own stage buffers, idle by then), then adds the SplitK
// partials in rank order, ((P0 + P1) + P2) + P3: the order is fixed, so results are bitwise
// reproducible and do not depend on M or on the tile's N (batch invariance), and the exchange moves
// (SplitK-1)/SplitK of a tile per CTA in parallel.
// The B operand must be constant for the step (weights): the producer loads the B tile of its
// first stage before waiting for the previous kernel (programmatic dependent launch), so its
// latency overlaps the predecessor's tail.
// Operand multicast: L2 bandwidth (~8.5 TB/s), not the tensor cores, bounds these GEMMs at small M,
// so CTAs of one cluster that need the same tile load a slice each and multicast it to all:
// ClusterN CTAs along x (different N tiles) share the A tile, ClusterM CTAs along y (different M
// tiles) share the B tile. A stage is then refilled only after the consumers of every CTA it is
// multicast to have released it (their empty-barrier arrivals go to each CTA of the group).
// Two-CTAs-per-SM variants (BN <= 128): 288 threads, consumers first and a producer warp last, so
// one CTA's epilogue overlaps the other's mainloop.
// Persistent variants (no split-K): a grid of at most one CTA per SM walks the tiles (N fastest);
// the stage ring runs on across tiles, so the producer loads the next tile's first stages while the
// consumers run the epilogue of the current one (no pipeline fill per tile, no relaunch per wave).
// With B multicast, each resident cluster walks units of ClusterM M tiles that share a B tile.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <utility>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/arch/mma_sm90_gmma_ext.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda::sm90 {

// Compile-time tile configuration of one GEMM variant.
template <int BN_, int Stages_, int SplitK_, int ClusterN_ = 1, int ClusterM_ = 1, bool Persistent_ = false,
          int CtasPerSm_ = 1, int BM_ = 128>
struct GemmTile {
  // 128 rows: two consumer warpgroups of 64 rows x BN. 64 rows (small tiles at small M: more CTAs
  // without splitting K): one consumer warpgroup for all BN columns. Two splitting the columns timed
  // slower (15.8 against 14.3 us for the 64 x 64 down tile at M = 512, H100): each reads the whole
  // A tile from shared memory, and they double the per-k-step issue work for the same MMAs.
  // 256 rows (with BN <= 192): two consumer warpgroups of 128 rows, two m64 accumulator blocks each
  // (192 registers at BN = 192): 256 x 192 needs 22% fewer operand bytes per MMA than 128 x 256.
  // (Three consumers of 64 x 256 would do the same, but at 512 threads the launch bound caps every
  // instruction at 128 registers and an m64n256 MMA needs 154: ptxas refuses it.)
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int kConsumers = BM == 64 ? 1 : 2;
  static constexpr int kConsumerRows = BM / kConsumers;
  static constexpr int kMmaM = kConsumerRows / 64;  // m64 accumulator blocks per consumer thread
  static constexpr int BK = 64;  // one 128-byte swizzle atom of bf16
  static constexpr int Stages = Stages_;
  static constexpr int SplitK = SplitK_;
  static constexpr int ClusterN = ClusterN_;  // CTAs along x sharing (multicasting) the A tile
  static constexpr int ClusterM = ClusterM_;  // CTAs along y sharing (multicasting) the B tile
  static constexpr int kClusterSize = ClusterN * ClusterM * SplitK;
  static constexpr bool kPersistent = Persistent_;
  // CTAs whose consumers must release a stage before it is refilled: the A group and the B group.
  static constexpr int kGroupCtas = ClusterN + ClusterM - 1;
  static constexpr int kBoxRowsA = BM / ClusterN;  // rows of A each CTA loads (TMA box)
  static constexpr int kBoxRowsB = BN / ClusterM;  // rows of B each CTA loads (TMA box)
  static constexpr int kCtasPerSm = CtasPerSm_;
  // One CTA per SM: warpgroup 0 produces (its registers handed to the consumers by setmaxnreg),
  // warpgroups 1-2 consume (1 alone with 64-row tiles). Two CTAs per SM: warpgroups 0-1 consume and
  // one warp after them produces; no register reconfiguration (setmaxnreg needs whole warpgroups,
  // and ptxas must fit the MMAs into the launch bound: 288 threads x 2 CTAs leave 112 registers per
  // thread).
  static constexpr int kThreads = kCtasPerSm == 1 ? 128 * (1 + kConsumers) : 128 * kConsumers + 32;
  // setmaxnreg targets (one CTA per SM): the producer hands its registers to the consumers, and the
  // two targets together must fit the register file.
  static constexpr int kProducerRegs = kMmaM == 2 ? 24 : 40;
  static constexpr int kConsumerRegs = kMmaM == 2 ? 240 : 232;
  static constexpr int kFirstConsumerThread = kCtasPerSm == 1 ? 128 : 0;
  static constexpr int kProducerThread = kCtasPerSm == 1 ? 0 : 128 * kConsumers;
  static constexpr int kAccPerThread = BN / 2;  // m64nBN f32 accumulators per thread
  static constexpr int kStageBytesA = BM * BK * 2;
  static constexpr int kStageBytesB = BN * BK * 2;
  // Split-K exchange: each rank receives, for its BN/SplitK columns, the partials of the other ranks
  // (float4 per thread and 8-column block), in its stage buffers once every mainloop of the cluster is done.
  static constexpr int kOwnBlocks = BN / 8 / SplitK;  // 8-column accumulator blocks a rank finishes
  static constexpr int kReduceBytes = (SplitK - 1) * kConsumers * kOwnBlocks * 128 * 16;
  static constexpr int kSmemBytes = 1024 /*alignment slack*/ + Stages * (kStageBytesA + kStageBytesB) + 2 * Stages * 8;
  // CTAs resident per SM. With 2, one CTA's epilogue runs under the other's MMAs (with one CTA per
  // SM nothing overlaps the epilogue); the price is half the registers and shared memory each, so
  // the accumulators must fit 112 registers (BN <= 128) and the epilogue is staged in the
  // warpgroup's own A rows of the last stage (no separate staging buffer).
  static constexpr bool kStageEpilogueInA = kCtasPerSm > 1;

  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256,
                "tile N must be a multiple of 16 from 64 to 256 (a wgmma n; whole 8-row W1/W3 pairs)");
  static_assert(BM == 64 || BM == 128 || BM == 256, "tile M is 64 (one consumer warpgroup), 128 or 256 (two)");
  static_assert(BM == 128 || (SplitK == 1 && CtasPerSm_ == 1),
                "64- and 256-row tiles: no split-K exchange and no epilogue staged in A (both assume 64 rows "
                "per consumer)");
  static_assert(kMmaM == 1 || BN <= 192, "256-row tiles: two m64 x BN accumulator blocks must fit 240 registers");
  static_assert(kCtasPerSm > 1 || 128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536,
                "the setmaxnreg targets must fit the register file");
  static_assert(Stages >= 2 && Stages <= 16, "pipeline depth must be 2..16");
  static_assert(SplitK == 1 || SplitK == 2 || SplitK == 4, "split-K is a cluster of 1, 2 or 4 CTAs along z");
  static_assert(BN / 8 % SplitK == 0, "each split-K rank finishes a whole number of 8-column blocks");
  static_assert(kReduceBytes <= Stages * (kStageBytesA + kStageBytesB),
                "the split-K partials received by a rank must fit its stage buffers");
  static_assert(ClusterN == 1 || ClusterM == 1, "multicast along one grid dimension at a time");
  static_assert(kClusterSize <= 8, "portable cluster size is at most 8");
  static_assert(!kPersistent || (SplitK == 1 && ClusterN == 1),
                "persistent variants run without split-K, and multicast only the B tile (ClusterM)");
  static_assert((kBoxRowsA * 128) % 1024 == 0 && (kBoxRowsB * 128) % 1024 == 0,
                "multicast slices must start on 1024-byte boundaries to keep the 128B swizzle pattern");
  static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0,
                "stage buffers must keep the 1024-byte alignment of the 128B swizzle");
  static_assert(kCtasPerSm == 1 || kCtasPerSm == 2, "one or two CTAs per SM");
  static_assert(kCtasPerSm == 1 || (BN <= 128 && !kPersistent && SplitK == 1),
                "two CTAs per SM: accumulators within 112 registers (BN <= 128), and the epilogue reuses the "
                "last stage, so no loads may still be in flight (not persistent, no split-K)");
};

// The m64 x BN x k16 bf16 wgmma with both operands K-major in shared memory, for the compiled tile widths.
template <int BN>
struct WgmmaAtom;
#define SWAPFFN_WGMMA_ATOM(N)                                                                          \
  template <>                                                                                          \
  struct WgmmaAtom<N> {                                                                                \
    using Op = cute::SM90::GMMA::MMA_64x##N##x16_F32BF16BF16_SS<cute::SM90::GMMA::Major::K,            \
                                                                 cute::SM90::GMMA::Major::K>;          \
  };
SWAPFFN_WGMMA_ATOM(64)
SWAPFFN_WGMMA_ATOM(128)
SWAPFFN_WGMMA_ATOM(176)
SWAPFFN_WGMMA_ATOM(192)
SWAPFFN_WGMMA_ATOM(256)
#undef SWAPFFN_WGMMA_ATOM

template <class Op, int N, size_t... I>
__device__ __forceinline__ void wgmma_call(uint64_t da, uint64_t db, float (&d)[N], cute::SM90::GMMA::ScaleOut scale,
                                           std::index_sequence<I...>) {
  Op::fma(da, db, d[I]..., scale);
}

// Orders the wgmmas' asynchronous accumulator accesses against the surrounding code.
template <int MM, int N>
__device__ __forceinline__ void fence_accumulators(float (&acc)[MM][N]) {
  #pragma unroll
  for (int r = 0; r < MM; ++r)
  #pragma unroll
    for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(acc[r][i]);
}

// Shared-memory matrix descriptor of a K-major tile laid out by TMA with 128-byte swizzle:
// 8-row groups of 128-byte rows, 1024 bytes apart.
__device__ __forceinline__ uint64_t sw128_desc(const void* smem) {
  cute::GmmaDescriptor d;
  d.bitfield.start_address_ = static_cast<uint16_t>((cute::cast_smem_ptr_to_uint(smem) & 0x3FFFF) >> 4);
  d.bitfield.leading_byte_offset_ = 1;
  d.bitfield.stride_byte_offset_ = 1024 >> 4;
  d.bitfield.base_offset_ = 0;
  d.bitfield.layout_type_ = 1;  // SWIZZLE_128B
  return d.desc_;
}

// Position of accumulator pair p (0..BN/4-1, covering columns 2p..2p+1 of one 8-column block) of a
// thread of a consumer warpgroup: rows r and r + 8 share the same columns.
struct AccCoord {
  int row;  // within the warpgroup's 64 rows, for the first half (add 8 for the second)
  int col;  // first of two adjacent columns within the tile
};
__device__ __forceinline__ AccCoord acc_coord(int thread_in_wg, int block8) {
  const int warp = thread_in_wg / 32, lane = thread_in_wg % 32;
  return {warp * 16 + lane / 4, block8 * 8 + (lane % 4) * 2};
}


// The epilogue interface: `Epi::finish(thread_in_wg)` once per consumer thread after its last tile,
// and `Epi::apply(params, acc, m_base, n_base, M, thread_in_wg, stage, barrier, j_begin, j_end)`
// with acc holding the accumulators of 64 rows starting at m_base and BN columns from n_base, fully
// reduced in the 8-column blocks [j_begin, j_end) that this CTA must write (all of them without
// split-K); stage is Epi::smem_bytes<BN>() of shared memory owned by this consumer warpgroup and
// barrier a named-barrier id (1 or 2) for its 128 threads. Launchers pass
// kernel_smem_bytes<Tile, Epi>() (below) as the dynamic shared memory.
template <class Tile, class Epi>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kCtasPerSm)
    sm90_bf16_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                          const __grid_constant__ typename Epi::Params params, int M, int k_tiles_per_split, int tiles_n,
                          int num_tiles) {
  constexpr int BM = Tile::BM, BN = Tile::BN, BK = Tile::BK, S = Tile::Stages;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  using EmptyBarrier = cutlass::arch::ClusterBarrier;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem_a + S * Tile::kStageBytesA;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_b + S * Tile::kStageBytesB);
  uint64_t* empty = full + S;
  // Epilogue staging (Epi::smem_bytes<BN>() per consumer warpgroup), after the barriers; 1024-byte
  // aligned so a TMA store can read it with the 128-byte swizzle.
  uint8_t* epi_smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(empty + S) + 1023) & ~uintptr_t(1023));

  // Position in the (ClusterN, ClusterM, SplitK) cluster; ranks are x-fastest.
  const int cx = blockIdx.x % Tile::ClusterN, cy = blockIdx.y % Tile::ClusterM;
  const int split = Tile::SplitK > 1 ? static_cast<int>(blockIdx.z) : 0;
  const auto rank_of = [](int x, int y, int z) { return x + Tile::ClusterN * (y + Tile::ClusterM * z); };
  const int k_tile0 = split * k_tiles_per_split;
  const bool producer = Tile::kCtasPerSm == 1 ? threadIdx.x < 128 : threadIdx.x >= Tile::kProducerThread;
  // Tiles of this CTA: one (its grid position), or every gridDim.x-th of the linear tile order. With
  // B multicast (ClusterM CTAs along y) a persistent cluster walks units of ClusterM M tiles that
  // share one B tile, every CTA of it the same units in the same order (num_tiles counts units).
  constexpr int CM = Tile::ClusterM;
  const int tile0 = !Tile::kPersistent ? 0 : CM > 1 ? static_cast<int>(blockIdx.y) / CM : static_cast<int>(blockIdx.x);
  const int tile_step = !Tile::kPersistent ? 1 : CM > 1 ? static_cast<int>(gridDim.y) / CM : static_cast<int>(gridDim.x);
  const int tile_end = Tile::kPersistent ? num_tiles : 1;
  const auto n_tile_of = [&](int tile) { return Tile::kPersistent ? tile % tiles_n : static_cast<int>(blockIdx.x); };
  const auto m_tile_of = [&](int tile) { return Tile::kPersistent ? tile / tiles_n * CM + cy : static_cast<int>(blockIdx.y); };

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      Barrier::init(&full[s], 1);
      EmptyBarrier::init(&empty[s], Tile::kConsumers * 4 * Tile::kGroupCtas);
    }
    cutlass::arch::fence_barrier_init();
    cute::prefetch_tma_descriptor(&tma_a);
    cute::prefetch_tma_descriptor(&tma_b);
  }
  // Barrier inits must be visible cluster-wide before any peer multicasts or arrives.
  if constexpr (Tile::kClusterSize > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }
  if (producer) {
    if constexpr (Tile::kCtasPerSm == 1) cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegs>();
    if (threadIdx.x == Tile::kProducerThread) {
      uint16_t mask_a = 0, mask_b = 0;
      for (int x = 0; x < Tile::ClusterN; ++x) mask_a |= uint16_t(1u << rank_of(x, cy, split));
      for (int y = 0; y < Tile::ClusterM; ++y) mask_b |= uint16_t(1u << rank_of(cx, y, split));
      const auto load_b = [&](int s, int it, int n_tile) {
        uint8_t* b_dst = smem_b + s * Tile::kStageBytesB + cy * Tile::kBoxRowsB * 128;
        const int k = (k_tile0 + it) * BK, b_row = n_tile * BN + cy * Tile::kBoxRowsB;
        if constexpr (Tile::ClusterM > 1)
          cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&tma_b, &full[s], mask_b, 0, b_dst, k, b_row);
        else
          cute::SM90_TMA_LOAD_2D::copy(&tma_b, &full[s], 0, b_dst, k, b_row);
      };
      // The weights of the first stage (a fresh barrier: no wait for consumers) before the PDL wait.
      // One stage only: the copy engine serves a CTA's loads in order, so A of stage 0 waits behind
      // every B issued before it; with B of all stages first the first MMA waited for 4 B tiles
      // (dual GEMM +0.7 us at M = 512, measured), with one it waits for what it always needed.
      const int prefetched = k_tiles_per_split < 1 ? k_tiles_per_split : 1;
      if (tile0 < tile_end)
        for (int it = 0; it < prefetched; ++it) {
          Barrier::arrive_and_expect_tx(&full[it], Tile::kStageBytesA + Tile::kStageBytesB);
          load_b(it, it, n_tile_of(tile0));
        }
      pdl_wait();  // A is what the previous kernel of the step wrote
      int g = 0;  // k-steps issued so far by this CTA (the ring position runs on across tiles)
      for (int tile = tile0; tile < tile_end; tile += tile_step) {
        const int n_tile = n_tile_of(tile), m_tile = m_tile_of(tile);
        for (int it = 0; it < k_tiles_per_split; ++it, ++g) {
          const int s = g % S;
          if (g >= prefetched) {
            EmptyBarrier::wait(&empty[s], ((g / S) & 1) ^ 1);
            Barrier::arrive_and_expect_tx(&full[s], Tile::kStageBytesA + Tile::kStageBytesB);
            load_b(s, it, n_tile);
          }
          const int k = (k_tile0 + it) * BK;
          uint8_t* a_dst = smem_a + s * Tile::kStageBytesA + cx * Tile::kBoxRowsA * 128;
          const int a_row = m_tile * BM + cx * Tile::kBoxRowsA;
          if constexpr (Tile::ClusterN > 1)
            cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&tma_a, &full[s], mask_a, 0, a_dst, k, a_row);
          else
            cute::SM90_TMA_LOAD_2D::copy(&tma_a, &full[s], 0, a_dst, k, a_row);
        }
      }
    }
    if constexpr (Tile::kClusterSize > 1) {
      // Peers may still arrive on this CTA's barriers or write its stage buffers (split-K exchange):
      // leave only when the whole cluster is done. One cluster barrier per consumer barrier.
      for (int i = 0; i < (Tile::SplitK > 1 ? 2 : 1); ++i) {
        cute::cluster_arrive();
        cute::cluster_wait();
      }
    }
    return;
  }

  // The epilogue reads and writes what the previous kernel of the step wrote (h, for the residual).
  pdl_wait();
  pdl_launch_dependents();

  if constexpr (Tile::kCtasPerSm == 1) cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegs>();
  // Consumer c owns the tile's rows [c R, c R + R), R = kConsumerRows, as kMmaM blocks of 64 rows.
  constexpr int MM = Tile::kMmaM;
  const int c = (threadIdx.x - Tile::kFirstConsumerThread) / 128;
  const int t = threadIdx.x % 128;
  // A stage is released to every CTA that multicasts into it (and to this one).
  const auto release = [&](int s) {
    if (t % 32 != 0) return;
    for (int x = 0; x < Tile::ClusterN; ++x) EmptyBarrier::arrive(&empty[s], rank_of(x, cy, split), 1);
    for (int y = 0; y < Tile::ClusterM; ++y)
      if (y != cy) EmptyBarrier::arrive(&empty[s], rank_of(cx, y, split), 1);
  };
  // No zero fill: the first MMA overwrites (scale-d 0). A fill would be a non-wgmma definition of
  // the accumulators inside the MMA pipeline, which serialises the wgmmas (ptxas C7515).
  float acc[MM][Tile::kAccPerThread];

  int g = 0;  // k-steps consumed so far by this CTA
  for (int tile = tile0; tile < tile_end; tile += tile_step) {
    const int n_tile = n_tile_of(tile), m_tile = m_tile_of(tile);
    for (int it = 0; it < k_tiles_per_split; ++it, ++g) {
      const int s = g % S;
      const uint32_t phase = (g / S) & 1;
      Barrier::wait(&full[s], phase);
      const uint8_t* a = smem_a + s * Tile::kStageBytesA + c * Tile::kConsumerRows * 128;
      const uint8_t* b = smem_b + s * Tile::kStageBytesB;
      fence_accumulators(acc);
      cute::warpgroup_arrive();
  #pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)
  #pragma unroll
        for (int r = 0; r < MM; ++r)
          wgmma_call<typename WgmmaAtom<BN>::Op>(
              sw128_desc(a + r * 64 * 128 + kk * 32), sw128_desc(b + kk * 32), acc[r],
              (it == 0 && kk == 0) ? cute::SM90::GMMA::ScaleOut::Zero : cute::SM90::GMMA::ScaleOut::One,
              std::make_index_sequence<Tile::kAccPerThread>{});
      cute::warpgroup_commit_batch();
      // Keep this k-step's MMAs in flight while the previous one's stage is handed back.
      cute::warpgroup_wait<1>();
      fence_accumulators(acc);
      if (it > 0) release((g + S - 1) % S);
    }
    cute::warpgroup_wait<0>();
    fence_accumulators(acc);
    // The tile's last stage goes back too: the producer may already fill it for the next tile.
    if constexpr (Tile::kPersistent) release((g + S - 1) % S);

    // 8-column accumulator blocks this CTA finishes: all, or its rank's share of a split-K tile.
    int j_begin = 0, j_end = BN / 8;
    if constexpr (Tile::SplitK > 1) {
      constexpr int KS = Tile::SplitK, OB = Tile::kOwnBlocks;
      // Received partials live in this CTA's stage buffers, [source slot][consumer][own block][thread]
      // float4 (the four accumulators of one 8-column block; a private per-thread layout). Nothing may
      // write there before every mainloop of the cluster is done (TMA loads, MMA reads).
      float4* recv = reinterpret_cast<float4*>(smem_a);
      const auto slot_of = [](int src, int dst) { return src < dst ? src : src - 1; };
      cute::cluster_arrive();
      cute::cluster_wait();
      const uint32_t local = cute::cast_smem_ptr_to_uint(recv);
  #pragma unroll
      for (int dst = 0; dst < KS; ++dst) {
        if (dst == split) continue;
        uint32_t remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank_of(cx, cy, dst)));
        remote += ((slot_of(split, dst) * Tile::kConsumers + c) * OB * 128 + t) * 16;
  #pragma unroll
        for (int jj = 0; jj < OB; ++jj) {
          const float* v = &acc[0][4 * (dst * OB + jj)];
          asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(remote + jj * 128 * 16), "f"(v[0]),
                       "f"(v[1]), "f"(v[2]), "f"(v[3])
                       : "memory");
        }
      }
      cute::cluster_arrive();
      cute::cluster_wait();
      // ((P0 + P1) + P2) + P3 over the ranks, this rank's own partial in its place. (Blocks are
      // walked at compile-time indices: a runtime index would put acc in local memory and serialise
      // the wgmmas.)
  #pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        if (j / OB != split) continue;
        const int jj = j % OB;
        float* own = &acc[0][4 * j];
        auto part = [&](int src) {
          return src == split ? make_float4(own[0], own[1], own[2], own[3])
                              : recv[((slot_of(src, split) * Tile::kConsumers + c) * OB + jj) * 128 + t];
        };
        float4 sum = part(0);
  #pragma unroll
        for (int src = 1; src < KS; ++src) {
          const float4 p = part(src);
          sum.x += p.x;
          sum.y += p.y;
          sum.z += p.z;
          sum.w += p.w;
        }
        own[0] = sum.x;
        own[1] = sum.y;
        own[2] = sum.z;
        own[3] = sum.w;
      }
      j_begin = split * OB;
      j_end = j_begin + OB;
    } else if constexpr (Tile::kClusterSize > 1 && !Tile::kPersistent) {
      cute::cluster_arrive();
      cute::cluster_wait();
    }
    // Staging: this warpgroup's own 64 rows of A in the last stage (only its MMAs read them, and
    // they are complete; no load is in flight), or the separate buffer.
    uint8_t* stage = Tile::kStageEpilogueInA ? smem_a + ((g + S - 1) % S) * Tile::kStageBytesA + c * Tile::kConsumerRows * 128
                                             : epi_smem + c * Epi::template smem_bytes<BN>();
    // One 64-row block at a time; the epilogue waits until the copy engine has read its staging.
  #pragma unroll
    for (int r = 0; r < MM; ++r)
      Epi::template apply<BN>(params, acc[r], m_tile * BM + c * Tile::kConsumerRows + r * 64, n_tile * BN, M, t, stage,
                              1 + c, j_begin, j_end);
  }
  // A persistent cluster meets once, after its last tile (matching the producer's one arrival): a CTA
  // whose peer is still in its mainloop may yet receive multicast bytes and empty-barrier arrivals.
  if constexpr (Tile::kClusterSize > 1 && Tile::kPersistent) {
    cute::cluster_arrive();
    cute::cluster_wait();
  }
  Epi::finish(t);  // e.g. outstanding asynchronous stores of the staging
}

// Dynamic shared memory of a kernel instance: the tile's, the staging of both consumer warpgroups
// and the alignment of the staging (the tile's 1024 bytes of slack cover the barriers too).
template <class Tile, class Epi>
constexpr int kernel_smem_bytes() {
  static_assert(!Tile::kStageEpilogueInA || Epi::template smem_bytes<Tile::BN>() <= 64 * 128,
                "the epilogue staged in a warpgroup's A rows must fit their 8 KB");
  if constexpr (Tile::kStageEpilogueInA) return Tile::kSmemBytes;
  return Tile::kSmemBytes + 1024 + Tile::kConsumers * Epi::template smem_bytes<Tile::BN>();
}

// Stores into an epilogue's staging by shared-window address. Through a generic pointer ptxas cannot
// tell that the staging is shared memory and emits generic stores (ST.E, with 64-bit address math).
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_shared_v2_f32(uint32_t addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(x), "f"(y) : "memory");
}

// bar.sync on a named barrier for the 128 threads of one warpgroup.
__device__ __forceinline__ void warpgroup_bar(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }

}  // namespace swapffn::cuda::sm90
