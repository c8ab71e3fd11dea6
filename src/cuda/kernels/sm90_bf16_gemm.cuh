// A warp-specialised Hopper GEMM mainloop, D[M,N] = A[M,K] * B[N,K]^T with bf16 operands (both
// K-major) and fp32 accumulators, parameterised by an epilogue. It exists because the Swap-FFN up
// projection needs an epilogue cuBLAS cannot fuse (SwiGLU of interleaved gate/up columns) and
// because the same tile of weights must serve 128 core rows at once.
//
// Structure (per CTA, 384 threads): warpgroup 0 is the producer (one thread issues TMA loads of the
// A and B tiles into a ring of `Stages` shared-memory buffers, completing on mbarriers); warpgroups
// 1 and 2 are consumers, each owning 64 rows of the 128-row tile and issuing wgmma m64nBNk16 on the
// swizzled tiles.
// The B operand must be constant for the step (weights): the producer loads the B tile of its
// first stage before waiting for the previous kernel (programmatic dependent launch), so its
// latency overlaps the predecessor's tail.
// B multicast: L2 bandwidth, not the tensor cores, bounds these GEMMs at small M, so ClusterM CTAs
// along y (different M tiles) that need the same B tile load a slice each and multicast it to all.
// A stage is then refilled only after the consumers of every CTA it is multicast to have released it.
// Persistent tiles: a grid of at most one CTA per SM walks the tiles (N fastest); the stage ring
// runs on across tiles, so the producer loads the next tile's first stages while the consumers run
// the epilogue of the current one. With B multicast, each resident cluster walks units of ClusterM
// M tiles that share a B tile.
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

// Compile-time tile configuration: 128 x BN outputs, Stages deep, B multicast over ClusterM CTAs.
template <int BN_, int Stages_, int ClusterM_ = 1, bool Persistent_ = false>
struct GemmTile {
  static constexpr int BM = 128;
  static constexpr int BN = BN_;
  static constexpr int kConsumers = 2;                // warpgroups of 64 rows each
  static constexpr int kConsumerRows = BM / kConsumers;
  static constexpr int kMmaM = 1;                     // m64 accumulator blocks per consumer thread
  static constexpr int BK = 64;                       // one 128-byte swizzle atom of bf16
  static constexpr int Stages = Stages_;
  static constexpr int ClusterM = ClusterM_;          // CTAs along y sharing (multicasting) the B tile
  static constexpr int kClusterSize = ClusterM;
  static constexpr bool kPersistent = Persistent_;
  static constexpr int kGroupCtas = ClusterM;         // CTAs whose consumers must release a stage
  static constexpr int kBoxRowsA = BM;                // rows of A each CTA loads (TMA box)
  static constexpr int kBoxRowsB = BN / ClusterM;     // rows of B each CTA loads (TMA box)
  // Warpgroup 0 produces (its registers handed to the consumers by setmaxnreg), 1-2 consume.
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  static constexpr int kFirstConsumerThread = 128;
  static constexpr int kProducerThread = 0;
  static constexpr int kAccPerThread = BN / 2;        // m64nBN f32 accumulators per thread
  static constexpr int kStageBytesA = BM * BK * 2;
  static constexpr int kStageBytesB = BN * BK * 2;
  static constexpr int kSmemBytes = 1024 /*alignment slack*/ + Stages * (kStageBytesA + kStageBytesB) + 2 * Stages * 8;

  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 256,
                "tile N must be a multiple of 16 from 64 to 256 (a wgmma n; whole 8-row W1/W3 pairs)");
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536,
                "the setmaxnreg targets must fit the register file");
  static_assert(Stages >= 2 && Stages <= 16, "pipeline depth must be 2..16");
  static_assert(kClusterSize <= 8, "portable cluster size is at most 8");
  static_assert((kBoxRowsB * 128) % 1024 == 0,
                "multicast slices must start on 1024-byte boundaries to keep the 128B swizzle pattern");
  static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0,
                "stage buffers must keep the 1024-byte alignment of the 128B swizzle");
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
// with acc holding the accumulators of 64 rows starting at m_base and BN columns from n_base, to be
// written in the 8-column blocks [j_begin, j_end) (all of them: no split-K); stage is Epi::smem_bytes<BN>() of shared memory owned by this consumer warpgroup and
// barrier a named-barrier id (1 or 2) for its 128 threads. Launchers pass
// kernel_smem_bytes<Tile, Epi>() (below) as the dynamic shared memory.
template <class Tile, class Epi>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    sm90_bf16_gemm_kernel(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
                          const __grid_constant__ typename Epi::Params params, int M, int k_tiles, int tiles_n,
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

  const int cy = blockIdx.y % Tile::ClusterM;  // this CTA's rank in its cluster of ClusterM along y
  const bool producer = threadIdx.x < 128;
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
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegs>();
    if (threadIdx.x == Tile::kProducerThread) {
      uint16_t mask_b = 0;
      for (int y = 0; y < Tile::ClusterM; ++y) mask_b |= uint16_t(1u << y);
      const auto load_b = [&](int s, int it, int n_tile) {
        uint8_t* b_dst = smem_b + s * Tile::kStageBytesB + cy * Tile::kBoxRowsB * 128;
        const int k = it * BK, b_row = n_tile * BN + cy * Tile::kBoxRowsB;
        if constexpr (Tile::ClusterM > 1)
          cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&tma_b, &full[s], mask_b, 0, b_dst, k, b_row);
        else
          cute::SM90_TMA_LOAD_2D::copy(&tma_b, &full[s], 0, b_dst, k, b_row);
      };
      // The weights of the first stage (a fresh barrier: no wait for consumers) before the PDL wait.
      // One stage only: the copy engine serves a CTA's loads in order, so A of stage 0 waits behind
      // every B issued before it; with B of all stages first the first MMA waited for 4 B tiles
      // (dual GEMM +0.7 us at M = 512, measured), with one it waits for what it always needed.
      const int prefetched = k_tiles < 1 ? k_tiles : 1;
      if (tile0 < tile_end)
        for (int it = 0; it < prefetched; ++it) {
          Barrier::arrive_and_expect_tx(&full[it], Tile::kStageBytesA + Tile::kStageBytesB);
          load_b(it, it, n_tile_of(tile0));
        }
      pdl_wait();  // A is what the previous kernel of the step wrote
      int g = 0;  // k-steps issued so far by this CTA (the ring position runs on across tiles)
      for (int tile = tile0; tile < tile_end; tile += tile_step) {
        const int n_tile = n_tile_of(tile), m_tile = m_tile_of(tile);
        for (int it = 0; it < k_tiles; ++it, ++g) {
          const int s = g % S;
          if (g >= prefetched) {
            EmptyBarrier::wait(&empty[s], ((g / S) & 1) ^ 1);
            Barrier::arrive_and_expect_tx(&full[s], Tile::kStageBytesA + Tile::kStageBytesB);
            load_b(s, it, n_tile);
          }
          cute::SM90_TMA_LOAD_2D::copy(&tma_a, &full[s], 0, smem_a + s * Tile::kStageBytesA, it * BK, m_tile * BM);
        }
      }
    }
    if constexpr (Tile::kClusterSize > 1) {
      // Peers may still arrive on this CTA's barriers: leave only when the whole cluster is done
      // (the consumers' one cluster barrier).
      cute::cluster_arrive();
      cute::cluster_wait();
    }
    return;
  }

  // The epilogue reads and writes what the previous kernel of the step wrote (h, for the residual).
  pdl_wait();
  pdl_launch_dependents();

  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegs>();
  // Consumer c owns the tile's rows [c R, c R + R), R = kConsumerRows, as kMmaM blocks of 64 rows.
  constexpr int MM = Tile::kMmaM;
  const int c = (threadIdx.x - Tile::kFirstConsumerThread) / 128;
  const int t = threadIdx.x % 128;
  // A stage is released to every CTA that multicasts into it (and to this one).
  const auto release = [&](int s) {
    if (t % 32 != 0) return;
    EmptyBarrier::arrive(&empty[s], cy, 1);
    for (int y = 0; y < Tile::ClusterM; ++y)
      if (y != cy) EmptyBarrier::arrive(&empty[s], y, 1);
  };
  // No zero fill: the first MMA overwrites (scale-d 0). A fill would be a non-wgmma definition of
  // the accumulators inside the MMA pipeline, which serialises the wgmmas (ptxas C7515).
  float acc[MM][Tile::kAccPerThread];

  int g = 0;  // k-steps consumed so far by this CTA
  for (int tile = tile0; tile < tile_end; tile += tile_step) {
    const int n_tile = n_tile_of(tile), m_tile = m_tile_of(tile);
    for (int it = 0; it < k_tiles; ++it, ++g) {
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

    if constexpr (Tile::kClusterSize > 1 && !Tile::kPersistent) {
      cute::cluster_arrive();
      cute::cluster_wait();
    }
    uint8_t* stage = epi_smem + c * Epi::template smem_bytes<BN>();
    // One 64-row block at a time; the epilogue waits until the copy engine has read its staging.
  #pragma unroll
    for (int r = 0; r < MM; ++r)
      Epi::template apply<BN>(params, acc[r], m_tile * BM + c * Tile::kConsumerRows + r * 64, n_tile * BN, M, t, stage,
                              1 + c, 0, BN / 8);
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
