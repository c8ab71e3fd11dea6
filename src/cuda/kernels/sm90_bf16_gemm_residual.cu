// FFN down-projection of the fused backend: h += u W2^T (or h = u W2^T without the residual), with
// the fp32 state h updated in the epilogue so the [M, D] product never round-trips separately.
// At B = 1 the problem has only 4 x D/BN tiles, too few for 132 SMs, and without a split every SM
// must ingest >= 1 MB of operands (cuBLAS's 64 x 64 tiles: 12.5 us at ~80 GB/s per SM). So K is
// split across a 2- or 4-CTA cluster whose partial sums meet in distributed shared memory in a fixed
// order (deterministic, and the same for every batch size and tile width: batch invariance).
#include <algorithm>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/sm90_bf16_gemm.cuh"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "cuda/tma.hpp"

namespace swapffn::cuda {
namespace {

struct ResidualEpilogue {
  struct Params {
    float* h;  // [M, D]
    int ld_h;  // D
    bool residual;
  };
  // fp32 pairs: four lanes cover 32 contiguous bytes of a row, whole sectors, so no staging.
  // The old values of a group of blocks are loaded together before any of them is stored: with a
  // load, add and store per pair, the compiler must assume a store may alias the next pair's load
  // (the row stride is a run-time value), so each of the tile's 2 x BN/8 loads waited for the
  // previous store, a chain of dependent L2 round trips (28% of the consumer's stall samples of the
  // 64-row tile at M = 512, Nsight Compute, eleventh session).
  static constexpr int kGroup = 8;  // 8-column blocks per group: 16 loads in flight, 32 registers
  template <int BN>
  static constexpr int smem_bytes() { return 0; }
  __device__ static void finish(int) {}
  template <int BN>
  __device__ static void apply(const Params& p, float (&acc)[BN / 2], int m_base, int n_base, int M, int t,
                               uint8_t* /*stage*/, int /*barrier*/, int j_begin, int j_end) {
    constexpr int kBlocks = BN / 8, G = kBlocks < kGroup ? kBlocks : kGroup;
    static_assert(kBlocks % G == 0, "whole groups of 8-column blocks");
    const auto dst_of = [&](int j, int half) {
      const sm90::AccCoord a = sm90::acc_coord(t, j);
      const int row = m_base + a.row + 8 * half;
      return row < M ? reinterpret_cast<float2*>(p.h + static_cast<size_t>(row) * p.ld_h + n_base + a.col) : nullptr;
    };
#pragma unroll
    for (int j0 = 0; j0 < kBlocks; j0 += G) {
      float2 old[G][2];
#pragma unroll
      for (int jj = 0; jj < G; ++jj)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float2* dst = dst_of(j0 + jj, half);
          const bool mine = j0 + jj >= j_begin && j0 + jj < j_end && dst != nullptr;  // else: another split-K rank's
          old[jj][half] = p.residual && mine ? *dst : make_float2(0.f, 0.f);
        }
#pragma unroll
      for (int jj = 0; jj < G; ++jj)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float2* dst = dst_of(j0 + jj, half);
          if (j0 + jj < j_begin || j0 + jj >= j_end || dst == nullptr) continue;
          const int j = j0 + jj;
          const float2 v = make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
          *dst = p.residual ? make_float2(old[jj][half].x + v.x, old[jj][half].y + v.y) : v;
        }
    }
  }
};

template <int BM, int BN, int Stages, int SplitK, int Multicast, bool Persistent>
void launch(const GemmResidualArgs& a, cudaStream_t stream, bool pdl) {
  using Tile = sm90::GemmTile<BN, Stages, SplitK, Multicast, 1, Persistent, 1, BM>;
  SWAPFFN_REQUIRE(a.n % (BN * Multicast) == 0, "down GEMM: D = " + std::to_string(a.n) +
                                                   " is not a multiple of the tile N x multicast " +
                                                   std::to_string(BN * Multicast));
  SWAPFFN_REQUIRE(a.k > 0 && a.k % (Tile::BK * SplitK) == 0,
                  "down GEMM: F = " + std::to_string(a.k) + " is not a positive multiple of 64 * split_k = " +
                      std::to_string(Tile::BK * SplitK));
  const CUtensorMap ta = make_tma_2d_bf16_sw128(a.a, a.m, a.k, Tile::kBoxRowsA, 64);
  const CUtensorMap tb = make_tma_2d_bf16_sw128(a.w, a.n, a.k, Tile::kBoxRowsB, 64);
  auto kernel = sm90::sm90_bf16_gemm_kernel<Tile, ResidualEpilogue>;
  const int m_tiles = (a.m + Tile::BM - 1) / Tile::BM, n_tiles = a.n / BN;
  const dim3 grid = Persistent ? dim3(static_cast<unsigned>(std::min(m_tiles * n_tiles, sm_count())))
                               : dim3(n_tiles, m_tiles, SplitK);
  launch_kernel_ex(kernel, grid, dim3(Tile::kThreads), dim3(Multicast, 1, SplitK),
                   sm90::kernel_smem_bytes<Tile, ResidualEpilogue>(), stream, pdl, ta, tb,
                     ResidualEpilogue::Params{a.h, a.n, a.residual}, a.m, a.k / Tile::BK / SplitK, n_tiles,
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
// 8 x 16 = 128 CTAs over the whole K) and its summation order (bitwise, tested); 14.3 us at M = 512
// against its 12.5-12.7 (H100, eleventh session). Measured and dropped: two consumer warpgroups of
// 32 columns (15.8 us), 13 stages (the same), the multicast pair of u (16.2) or of W2 (17.0), 64 x
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

}  // namespace

std::vector<GemmVariant> down_gemm_variants() {
  std::vector<GemmVariant> out;
  for (const auto& e : kResidualVariants) out.push_back(e.v);
  return out;
}

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

}  // namespace swapffn::cuda
