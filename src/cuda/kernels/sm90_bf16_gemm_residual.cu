// FFN down-projection of the fused backend: h += u W2^T (or h = u W2^T without the residual), with
// the fp32 state h updated in the epilogue so the [M, D] product never round-trips separately.
// At B = 1 the problem has only 4 x D/BN tiles, too few for 132 SMs, and without a split every SM
// must ingest >= 1 MB of operands (cuBLAS's 64 x 64 tiles: 12.5 us at ~80 GB/s per SM). So K is
// split across a 2- or 4-CTA cluster whose partial sums meet in distributed shared memory in a fixed
// order (deterministic, and the same for every batch size and tile width: batch invariance).
#include <algorithm>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/sm90_bf16_gemm.cuh"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda {
namespace {

struct ResidualEpilogue {
  struct Params {
    CUtensorMap h;  // h [M, D] fp32, boxes of 64 rows x 32 columns, 128-byte swizzle
    bool residual;
  };
  // The tile goes out through the copy engine, 32 columns (one 8 KB box of the warpgroup's 64 rows)
  // at a time: staged in shared memory in the TMA's 128-byte swizzle, then reduce-added into h in L2
  // (`cp.reduce.async.bulk.tensor ... .add`; a plain TMA store without the residual). The add is the
  // same one fp32 addition per output, h + sum, rounded to nearest, so the bits are those of a
  // load-add-store (and of cuBLAS's kernel, which adds its residual the same way; `swapffn tune`
  // compares the bits per variant). Only subnormal operands, which h does not hold, might be treated
  // differently by the copy engine's add. It exists because the consumers' own read-modify-write of
  // h was a dependent L2 round trip at the end of every tile that nothing overlapped: here the
  // warpgroup only writes shared memory, and the copy engine's writes run under the next tile's
  // mainloop (persistent variants) or after the CTA has gone (the others).
  // Two box slots per warpgroup: from the third box of a tile on, box i waits only until box i - 2's
  // copy has read its slot; the first two wait for every earlier copy (simpler, and the previous
  // tile's copies have long finished reading by then).
  static constexpr int kBoxCols = 32;
  static constexpr int kBoxBytes = 64 * kBoxCols * 4;
  static constexpr int kSlots = 2;
  template <int BN>
  static constexpr int smem_bytes() { return kSlots * kBoxBytes; }
  // Shared memory may go away once the copies have read it; their writes complete on their own and
  // are visible to the next kernel of the stream (and to a PDL dependent after its wait).
  __device__ static void finish(int t) {
    if (t == 0) cute::tma_store_wait<0>();
  }
  template <int BN>
  __device__ static void apply(const Params& p, float (&acc)[BN / 2], int m_base, int n_base, int /*M*/, int t,
                               uint8_t* stage, int barrier, int j_begin, int j_end) {
    static_assert(BN % kBoxCols == 0, "whole 32-column boxes per tile");
    // Rows past M fall outside the tensor map: the copy engine does not write them.
    const sm90::AccCoord a = sm90::acc_coord(t, 0);
    const int box_begin = j_begin * 8 / kBoxCols, box_end = j_end * 8 / kBoxCols;
#pragma unroll
    for (int b = 0; b < BN / kBoxCols; ++b) {
      if (b < box_begin || b >= box_end) continue;  // another split-K rank's columns
      const int i = b - box_begin;                  // this tile's i-th box
      uint8_t* slot = stage + (i % kSlots) * kBoxBytes;
      if (t == 0) {
        // The slot's previous box (of this tile, or of the last one) must have been read.
        if (i < kSlots)
          cute::tma_store_wait<0>();
        else
          cute::tma_store_wait<kSlots - 1>();
      }
      sm90::warpgroup_bar(barrier);
#pragma unroll
      for (int jj = 0; jj < kBoxCols / 8; ++jj) {
        const int j = b * (kBoxCols / 8) + jj, col = jj * 8 + a.col;  // col: within the box
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = a.row + 8 * half;
          // 16-byte chunk col / 4 of the row, swizzled by the row within its 8-row group.
          const uint32_t at = row * 128 + (((col / 4) ^ (row & 7)) * 16) + (col % 4) * 4;
          sm90::st_shared_v2_f32(cute::cast_smem_ptr_to_uint(slot) + at, acc[4 * j + 2 * half],
                                 acc[4 * j + 2 * half + 1]);
        }
      }
      cute::tma_store_fence();  // this thread's shared-memory writes become visible to the copy engine
      sm90::warpgroup_bar(barrier);
      if (t == 0) {
        if (p.residual)
          cute::SM90_TMA_REDUCE_ADD_2D::copy(&p.h, slot, n_base + b * kBoxCols, m_base);
        else
          cute::SM90_TMA_STORE_2D::copy(&p.h, slot, n_base + b * kBoxCols, m_base);
        cute::tma_store_arrive();
      }
    }
  }
};

template <int BM, int BN, int Stages, int SplitK, int Multicast, bool Persistent, GemmFeed Feed = GemmFeed::gemm>
void launch(const GemmResidualArgs& a, cudaStream_t stream, bool pdl) {
  using Tile = sm90::GemmTile<BN, Stages, SplitK, Multicast, 1, Persistent, 1, BM>;
  static_assert(BN / SplitK % ResidualEpilogue::kBoxCols == 0,
                "each split-K rank writes whole 32-column boxes of h (the epilogue's TMA box)");
  SWAPFFN_REQUIRE(a.n % (BN * Multicast) == 0, "down GEMM: D = " + std::to_string(a.n) +
                                                   " is not a multiple of the tile N x multicast " +
                                                   std::to_string(BN * Multicast));
  SWAPFFN_REQUIRE(a.k > 0 && a.k % (Tile::BK * SplitK) == 0,
                  "down GEMM: F = " + std::to_string(a.k) + " is not a positive multiple of 64 * split_k = " +
                      std::to_string(Tile::BK * SplitK));
  const CUtensorMap ta = make_tma_2d_bf16_sw128(a.a, a.m, a.k, Tile::kBoxRowsA, 64);
  const CUtensorMap tb = make_tma_2d_bf16_sw128(a.w, a.n, a.k, Tile::kBoxRowsB, 64);
  const CUtensorMap th = make_tma_2d_f32_sw128(a.h, a.m, a.n, 64);
  auto kernel = sm90::sm90_bf16_gemm_kernel<Tile, ResidualEpilogue, Feed>;
  const int m_tiles = (a.m + Tile::BM - 1) / Tile::BM, n_tiles = a.n / BN;
  const dim3 grid = Persistent ? dim3(static_cast<unsigned>(std::min(m_tiles * n_tiles, sm_count())))
                               : dim3(n_tiles, m_tiles, SplitK);
  launch_kernel_ex(kernel, grid, dim3(Tile::kThreads), dim3(Multicast, 1, SplitK),
                   sm90::kernel_smem_bytes<Tile, ResidualEpilogue>(), stream, pdl, ta, tb,
                     ResidualEpilogue::Params{th, a.residual}, a.m, a.k / Tile::BK / SplitK, n_tiles,
                     m_tiles * n_tiles);
}

// Clusters of the variant resident at once on this GPU (its split-K cluster, with its shared memory):
// a grid of more clusters than this runs in several waves.
template <int BM, int BN, int Stages, int SplitK, int Multicast, bool Persistent>
int clusters_per_wave() {
  using Tile = sm90::GemmTile<BN, Stages, SplitK, Multicast, 1, Persistent, 1, BM>;
  auto kernel = sm90::sm90_bf16_gemm_kernel<Tile, ResidualEpilogue>;
  const int smem = sm90::kernel_smem_bytes<Tile, ResidualEpilogue>();
  if (Tile::kClusterSize == 1) return max_ctas_per_wave(kernel, dim3(Tile::kThreads), smem);
  return max_active_clusters(kernel, dim3(Tile::kThreads), dim3(Multicast, 1, SplitK), smem);
}

// The compiled variants. bm 64 bn 64 st 12 (64-row tiles, one consumer warpgroup), no split:
// cuBLAS's B = 1 recipe (its pinned kernel, nvjet 64x64, 13 stages, a 2-CTA multicast cluster:
// 8 x 16 = 128 CTAs over the whole K) and its summation order (the same bits: `swapffn tune` compares
// them per variant; no test pins it, since cuBLAS may change its kernel); 14.0 us at M = 512 against
// its 13.5 (H100, twenty-fourth session). Measured and dropped: two consumer warpgroups of 32 columns
// (15.8 us), 13 stages (the same), the multicast pair of u (16.2) or of W2 (17.0), 64 x
// 128 tiles (15.9); multicast lowers our L2 reads but not the time. bn 64 with split-K 2:
// 4 * D/64 * 2 = 128 CTAs at B = 1 (D = 1024); bn 128 split 2: half the CTAs, more B reuse.
// bn 128 split 4: 128 CTAs at B = 1 again, each over K/4 with 128 x 128 tiles (half the operand
// bytes per SM of bn 64 split 2 or cuBLAS's 64 x 64 tiles); bn 256 split 4 is the same summation
// order with half the operand bytes per output at large M. bn 128 without split (sk1): a different
// summation order from the split variants; `tune` times it and compares its bits with cuBLAS's
// split-K-free algorithms, which all sum each output as one chain of k-steps as it does. _p:
// persistent. mc 2: two N tiles share each u tile through TMA multicast (a third less L2 traffic
// at bn 64). Measured and dropped (tenth session, H100): deeper
// pipelines with split (bn64 st8, bn128 st6: the same times as st6 / st4, so the k-step time at
// small M does not follow the bytes in flight). Split 4 is slower than split 2 at every M on an
// H100: only 30 four-CTA clusters of these tiles are resident at once (128 CTAs at B = 1 take two
// waves), and the partials' exchange costs more than the shorter K saves; it stays selectable
// (down=sk4) as a summation order of its own.
struct ResidualEntry {
  GemmVariant v;
  void (*fn)(const GemmResidualArgs&, cudaStream_t, bool);
  int (*per_wave)();
};
#define SWAPFFN_DOWN_VARIANT(BM, BN, ST, SK, MC, P) \
  {{BN, ST, SK, MC, P, 1, BM}, launch<BM, BN, ST, SK, MC, P>, clusters_per_wave<BM, BN, ST, SK, MC, P>}
constexpr ResidualEntry kResidualVariants[] = {
    SWAPFFN_DOWN_VARIANT(128, 64, 6, 2, 2, false),   SWAPFFN_DOWN_VARIANT(128, 64, 6, 2, 1, false),
    SWAPFFN_DOWN_VARIANT(128, 128, 4, 2, 2, false),  SWAPFFN_DOWN_VARIANT(128, 128, 4, 2, 1, false),
    SWAPFFN_DOWN_VARIANT(128, 128, 4, 4, 1, false),  SWAPFFN_DOWN_VARIANT(128, 256, 4, 4, 1, false),
    SWAPFFN_DOWN_VARIANT(128, 128, 4, 1, 1, false),  SWAPFFN_DOWN_VARIANT(128, 128, 4, 1, 1, true),
    SWAPFFN_DOWN_VARIANT(128, 256, 4, 1, 1, true),   SWAPFFN_DOWN_VARIANT(64, 64, 12, 1, 1, false)};
#undef SWAPFFN_DOWN_VARIANT

// Diagnostic builds (GemmFeed): cuBLAS's B = 1 recipe and the persistent large-M tile.
// One place per variant for its name and its two builds, so that they agree.
#define SWAPFFN_DOWN_FEED(BM, BN, ST, P)                                           \
  {{BN, ST, 1, 1, P, 1, BM}, launch<BM, BN, ST, 1, 1, P, GemmFeed::operands_only>, \
   launch<BM, BN, ST, 1, 1, P, GemmFeed::mma_only>}
constexpr GemmFeedEntry<GemmResidualArgs> kResidualFeedVariants[] = {SWAPFFN_DOWN_FEED(64, 64, 12, false),
                                                                     SWAPFFN_DOWN_FEED(128, 256, 4, true)};
#undef SWAPFFN_DOWN_FEED

}  // namespace

std::vector<GemmVariant> down_gemm_variants() { return variants_of(kResidualVariants); }

int down_gemm_clusters_per_wave(const GemmVariant& v) {
  for (const auto& e : kResidualVariants)
    if (e.v == v) return e.per_wave();
  SWAPFFN_FAIL("down GEMM: no compiled variant " + v.name());
}

void launch_gemm_residual(const GemmResidualArgs& a, const GemmVariant& v, cudaStream_t stream, bool pdl) {
  for (const auto& e : kResidualVariants)
    if (e.v == v) return e.fn(a, stream, pdl);
  SWAPFFN_FAIL("down GEMM: no compiled variant " + v.name());
}

std::vector<GemmVariant> down_gemm_feed_variants() { return variants_of(kResidualFeedVariants); }

void launch_gemm_residual_feed(const GemmResidualArgs& a, const GemmVariant& v, GemmFeed feed, cudaStream_t stream) {
  launch_feed_of(kResidualFeedVariants, a, v, feed, stream, "down GEMM");
}

}  // namespace swapffn::cuda
