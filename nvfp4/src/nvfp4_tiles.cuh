// The instantiated tile configurations of the NVFP4 tile kernels, and the dispatch from the
// run-time Tile enum to them. Shared by the GEMM, dual GEMM and grouped GEMM kernel files; which
// config runs for which problem is decided in nvfp4_config.cpp.
#pragma once
#include <type_traits>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_rs_mainloop.cuh"
#include "nvfp4_tile_mainloop.cuh"
#include "cuda/runtime/launch.hpp"
#include "swapffn/error.hpp"
#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::cuda::nvfp4 {

using swapffn::nvfp4::Tile;

// mma.sync tiles for small M (WarpsM, WarpsN, NT, NB, Stages, MinBlocks): 64 rows, 4 stages, two
// CTAs per SM so that one CTA's MMAs cover the other's barrier and dequant phases.
using GemmM64N128 = TileCfg<1, 4, 4, 1, 4, 2>;
using DualM64N64 = TileCfg<1, 4, 2, 2, 4, 2>;  // BN per B operand; the two products share the A tile
// wgmma tiles (shared-memory operands, no TMA): where the weight scales are only 4-byte aligned.
using GemmM128N128Wg = TileCfg<2, 4, 4, 1, 3, 2>;
using DualM128N64Wg = TileCfg<2, 4, 2, 2, 3, 2>;
static_assert(GemmM64N128::BM == 64 && GemmM64N128::BN == 128, "tile enum and config disagree");
static_assert(DualM64N64::BM == 64 && DualM64N64::BN == 64, "tile enum and config disagree");
static_assert(GemmM128N128Wg::BM == 128 && GemmM128N128Wg::BN == 128, "tile enum and config disagree");
static_assert(DualM128N64Wg::BM == 128 && DualM128N64Wg::BN == 64, "tile enum and config disagree");

// Register-operand tiles (nvfp4_rs_mainloop.cuh): 4 stages of 128 k (activation boxes 32 KB,
// weights 64 bytes and scales 16 per weight row: 42 KB for 128 rows, 52 KB for 256) keep 512 k of
// weights in flight per SM; a fifth stage measured no gain. 256 weight rows (two slabs per
// consumer warpgroup) halve the activation bytes each MMA needs from L2 and shared memory; the
// dual GEMM's 128 rows of B1 and of B2 are the same two slabs.
using GemmM128N128Rs = RsCfg<4, 128, 1>;
using GemmM128N256Rs = RsCfg<4, 256, 1>;  // the grouped GEMM's wide tile
using DualM128N128Rs = RsCfg<4, 128, 2>;
// GEMM `128x64rs`: 64 weight rows, the consumer warpgroups taking alternate stages (K split
// between them), 6 stages so that each has three in flight: twice the tiles of `128x128rs` for the
// short-K shapes whose 128-row tiles do not fill the SMs.
using GemmM128N64Rs = RsCfg<6, 64, 1, 2>;
// 64 rows of B1 (consumer warpgroup 0) and of B2 (warpgroup 1): twice the dual tiles of
// `128x128rs`, for the M = 256 shapes whose 128-row tiles would need split-K to fill the SMs.
using DualM128N64Rs = RsCfg<4, 64, 2>;
static_assert(GemmM128N128Rs::BM == 128 && GemmM128N128Rs::BN == 128, "tile enum and config disagree");
static_assert(GemmM128N256Rs::BM == 128 && GemmM128N256Rs::BN == 256, "tile enum and config disagree");
static_assert(DualM128N128Rs::BM == 128 && DualM128N128Rs::BN == 128, "tile enum and config disagree");
static_assert(DualM128N64Rs::BM == 128 && DualM128N64Rs::BN == 64, "tile enum and config disagree");

// Which mainloop a tile runs: mma.sync or wgmma on fp16 tiles in shared memory, or rs (weights
// converted into wgmma's register fragment, operands swapped; its kernels take tensor maps).
enum class Path { mma_sync, wgmma, rs };
template <Path P>
using PathTag = std::integral_constant<Path, P>;

// The accumulators of a tile's mainloop, and the mainloop itself. run_mainloop returns false in
// threads that hold no accumulators (the rs tiles' producer warpgroup), which must leave.
// (A trait, not std::conditional_t: that would instantiate every mainloop with every config.)
template <class Cfg, Path P>
struct AccOf {
  using type = typename TileMainloop<Cfg>::Acc;
};
template <class Cfg>
struct AccOf<Cfg, Path::wgmma> {
  using type = typename TileMainloop<Cfg>::WgAcc;
};
template <class Cfg>
struct AccOf<Cfg, Path::rs> {
  using type = typename RsMainloop<Cfg>::Acc;
};
template <class Cfg, Path P>
using Acc = typename AccOf<Cfg, P>::type;

// The kernels' tensor-map parameter: the operands' maps for the TMA path, empty otherwise.
template <Path P>
using TmaParam = std::conditional_t<P == Path::rs, TmaOperands, NoTma>;

// A grouped grid's CTA: its group (found by scanning the groups' first tile indices; G <= 64) and
// its tile's first row and column (a group's m tiles of one n tile are adjacent in launch order).
struct GroupTile {
  int g;
  int64_t row0, col0;
};
template <class Cfg, int G>
__device__ __forceinline__ GroupTile group_tile(const GroupedArgsOf<G>& args) {
  int g = 0;
  while (g + 1 < args.groups && static_cast<int>(blockIdx.x) >= args.g[g + 1].tile_begin) ++g;
  const GroupArgs& p = args.g[g];
  const int local = static_cast<int>(blockIdx.x) - p.tile_begin;
  return {g, static_cast<int64_t>(local % p.tiles_m) * Cfg::BM, static_cast<int64_t>(local / p.tiles_m) * Cfg::BN};
}
// The same for the rs grid, whose CTAs take 256-wide tiles in their first segment and 128-wide
// ones after it (GroupArgs; `wide` says which).
struct GroupRsTile : GroupTile {
  bool wide;
};
template <int G>
__device__ __forceinline__ GroupRsTile group_tile_rs(const GroupedArgsOf<G>& args) {
  const int cta = static_cast<int>(blockIdx.x);
  const bool wide = cta < args.wide_tiles;
  int g = 0;
  // A group without tiles in a segment begins where the next one does, and the scan passes it.
  while (g + 1 < args.groups && cta >= (wide ? args.g[g + 1].tile_begin : args.g[g + 1].narrow_begin)) ++g;
  const GroupArgs& p = args.g[g];
  const int local = cta - (wide ? p.tile_begin : p.narrow_begin);
  const int64_t col0 = wide ? static_cast<int64_t>(local / p.tiles_m) * 256
                            : static_cast<int64_t>(group_wide_cols(p.n, args.wide_n)) * 256 + static_cast<int64_t>(local / p.tiles_m) * 128;
  return {{g, static_cast<int64_t>(local % p.tiles_m) * 128, col0}, wide};
}
// The rs mainloop's sources of a grouped tile: the activations come from the group's tensor map
// (GroupMaps::act), so src[0] carries only their rows.
__device__ __forceinline__ void group_rs_sources(const GroupArgs& p, const GroupTile& t, TileSrc (&src)[2]) {
  src[0] = {nullptr, nullptr, p.m, t.row0, p.k, 0};
  src[1] = {p.b.data, p.b.scales, p.n, t.col0, p.k, p.b.rk_blocks};
}

// The rs tiles' K split across consumer warpgroups (RsCfg::kWgStride); 1 for every other tile.
template <class Cfg>
constexpr int wg_stride() {
  if constexpr (requires { Cfg::kWgStride; }) return Cfg::kWgStride;
  else return 1;
}

template <class Cfg, Path P>
__device__ __forceinline__ bool run_mainloop(uint8_t* smem, const TileSrc (&src)[1 + Cfg::kNB], int kt0, int count,
                                             Acc<Cfg, P>& acc, const TmaParam<P>& tma, int batch) {
  if constexpr (P == Path::rs) {
    return RsMainloop<Cfg>(smem).run(src, tma, batch, kt0, count, acc);
  } else if constexpr (P == Path::wgmma) {
    TileMainloop<Cfg>(smem).run_wgmma(src, kt0, count, acc);
    return true;
  } else {
    TileMainloop<Cfg>(smem).run(src, kt0, count, acc);
    return true;
  }
}

// Calls f(Cfg{}, PathTag<...>{}) with the single-B configuration of `tile`.
template <class F>
void dispatch_gemm_tile(Tile tile, F&& f) {
  switch (tile) {
    case Tile::m64_n128: f(GemmM64N128{}, PathTag<Path::mma_sync>{}); return;
    case Tile::m128_n128_wgmma: f(GemmM128N128Wg{}, PathTag<Path::wgmma>{}); return;
    case Tile::m128_n128_rs: f(GemmM128N128Rs{}, PathTag<Path::rs>{}); return;
    case Tile::m128_n64_rs: f(GemmM128N64Rs{}, PathTag<Path::rs>{}); return;
    default: SWAPFFN_FAIL(std::string("NVFP4 GEMM has no tile ") + swapffn::nvfp4::to_string(tile));
  }
}

template <class F>
void dispatch_dual_tile(Tile tile, F&& f) {
  switch (tile) {
    case Tile::m64_n64: f(DualM64N64{}, PathTag<Path::mma_sync>{}); return;
    case Tile::m128_n64_wgmma: f(DualM128N64Wg{}, PathTag<Path::wgmma>{}); return;
    case Tile::m128_n128_rs: f(DualM128N128Rs{}, PathTag<Path::rs>{}); return;
    case Tile::m128_n64_rs: f(DualM128N64Rs{}, PathTag<Path::rs>{}); return;
    default: SWAPFFN_FAIL(std::string("NVFP4 dual GEMM has no tile ") + swapffn::nvfp4::to_string(tile));
  }
}

// The body of the stream-K dual GEMM kernel (TileConfig::stream_k, nvfp4_stream_k.cuh)
// over an rs tile whose consumer warpgroups both take every stage: this CTA's segments through the
// rs mainloop, each tile split among CTAs summed by the CTA of its first part, which calls
// store(c, row0, col0, acc) for the finished tile (c: the tile's batch of the output).
template <class Cfg, class Store>
__device__ void run_stream_k_tiles(uint8_t* smem, const GemmArgs& args, const TmaOperands& tma, Store&& store) {
  const StreamKTiles<Cfg::BM, Cfg::BN, Cfg::BK> tiles(args);
  auto src_of = [&](int tile, TileSrc (&src)[1 + Cfg::kNB], int& batch) {
    batch = tiles.batch(tile);
    src[0] = {nullptr, nullptr, args.m, static_cast<int64_t>(tiles.m_tile(tile)) * Cfg::BM, args.k, 0};  // from the fp16 map
#pragma unroll
    for (int b = 0; b < Cfg::kNB; ++b)
      src[1 + b] = {args.b[b].data + batch * args.b[b].data_batch, args.b[b].scales + batch * args.b[b].scale_batch,
                    args.n, static_cast<int64_t>(tiles.n_tile(tile)) * Cfg::BN, args.k, args.b[b].rk_blocks};
  };
  using Acc = typename RsMainloop<Cfg>::Acc;
  auto epilogue = [&](const StreamKSegment& seg, Acc& acc) {
    if (seg.parts > 1 && !stream_k_fixup<Cfg::kAcc, Cfg::kAccThreads>(reinterpret_cast<float*>(&acc), args.partials,
                                                                       args.counters + seg.tile, seg.index, seg.parts,
                                                                       [&](int j) { return tiles.sk.slot(seg.tile, j); }))
      return;
    store(static_cast<__half*>(args.c) + tiles.batch(seg.tile) * args.m * args.n,
          static_cast<int64_t>(tiles.m_tile(seg.tile)) * Cfg::BM, static_cast<int64_t>(tiles.n_tile(seg.tile)) * Cfg::BN,
          acc);
  };
  Acc acc = {};
  static_assert(sizeof(acc) == sizeof(float) * Cfg::kAcc, "the reduction treats the accumulators as kAcc floats");
  RsMainloop<Cfg>(smem).run_stream_k(tiles.sk, static_cast<int>(blockIdx.x), tma, src_of, epilogue, acc);
}

// Stream-K launches (TileConfig::stream_k): the stages of all output tiles (tiles x K / BK), and
// the launch of `kernel` on min(args.stream_k, iters) CTAs, so that every CTA has a stage, as the
// pre-pass's programmatic dependent.
inline int64_t stream_k_iters(const GemmArgs& a, int bm, int bn, int bk) {
  return ((a.m + bm - 1) / bm) * ((a.n + bn - 1) / bn) * a.l * (a.k / bk);
}
template <class Kernel>
void launch_stream_k(Kernel kernel, const GemmArgs& args, int threads, int smem_bytes, int64_t iters,
                     const TmaOperands& maps, cudaStream_t stream) {
  const auto ctas = static_cast<unsigned>(args.stream_k < iters ? args.stream_k : iters);
  launch_kernel_ex(kernel, dim3(ctas), dim3(threads), dim3(1, 1, 1), smem_bytes, stream, true, args, maps);
}

// Tile launches (one CTA per output tile, batch x split-K along z) of the GEMM and dual GEMM
// kernels: the rs tiles take the tensor maps and a programmatic edge from the A pre-pass;
// launch_kernel_ex opts in to the shared memory and checks the launch.
template <class Cfg, Path P, class Kernel>
void launch_tiles(Kernel kernel, const GemmArgs& args, const TmaOperands& maps, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((args.m + Cfg::BM - 1) / Cfg::BM),
                  static_cast<unsigned>((args.n + Cfg::BN - 1) / Cfg::BN),
                  static_cast<unsigned>(args.l * args.split_k));
  if constexpr (P == Path::rs) {
    launch_kernel_ex(kernel, grid, dim3(Cfg::kThreads), dim3(1, 1, 1), Cfg::kSmemAlloc, stream, true, args, maps);
  } else {
    allow_dynamic_smem(kernel, Cfg::kSmemAlloc);
    kernel<<<grid, Cfg::kThreads, Cfg::kSmemAlloc, stream>>>(args, {});
    SWAPFFN_CHECK_LAUNCH();
  }
}

}  // namespace swapffn::cuda::nvfp4
