// NVFP4 grouped GEMM on Hopper: G independent problems (m_i, n_i, k_i), one launch.
//
// Why it exists: the groups' m_i are small and not multiples of 128 (MoE-style token counts), so
// launching G GEMMs would leave most SMs idle between launches and pay G launch latencies. One
// flat grid covers every group's output tiles; a CTA finds its group by scanning the groups' first
// tile indices (G <= 64, passed by value in the kernel parameters, so no setup copy is needed).
// Within a group the m tiles of one n tile are adjacent in launch order, so they run together and
// the group's B tile is read from HBM once and re-read from L2.
//
// The rs tiles (`128x128rs`, and `128x256rs` with two slabs) run the GEMM's register-operand
// mainloop (nvfp4_rs_mainloop.cuh) on the CTA's group: one pre-pass launch converts every group's
// activations into the workspace, and a second kernel parameter carries each group's three tensor
// maps, in a parameter block sized to the groups (with_group_capacity). One rs kernel runs both
// widths: a two-slab CTA costs ~1.7 one-slab CTAs, so a grid of two-slab tiles whose last wave
// would be mostly empty runs part of its columns as one-slab tiles after them, which fill the
// gaps (TileConfig::wide_n).
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_launch.hpp"
#include "nvfp4_tiles.cuh"
#include "cuda/runtime/launch.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

template <class Cfg, Path P, int G>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    nvfp4_grouped_gemm_kernel(const __grid_constant__ GroupedArgsOf<G> args) {
  extern __shared__ __align__(128) uint8_t smem[];
  const GroupTile gt = group_tile<Cfg>(args);
  const GroupArgs& p = args.g[gt.g];
  const int64_t row0 = gt.row0, col0 = gt.col0;
  TileSrc src[2];
  src[0] = {p.a.data, p.a.scales, p.m, row0, p.k, p.a.rk_blocks};
  src[1] = {p.b.data, p.b.scales, p.n, col0, p.k, p.b.rk_blocks};

  __half* c = static_cast<__half*>(p.c);
  Acc<Cfg, P> acc = {};
  if (!run_mainloop<Cfg, P>(smem, src, 0, p.k / Cfg::BK, acc, {}, 0)) return;
  if constexpr (P != Path::mma_sync)
    store_tile_wg<Cfg::BN>(c, p.m, p.n, row0, col0, [&](int r) { return acc[0][r]; });
  else
    store_tile<Cfg>(c, p.m, p.n, row0, col0, [&](int mt, int nt, int i) { return acc[0][mt][nt][i]; });
}

using GroupWide = GemmM128N256Rs;
using GroupNarrow = GemmM128N128Rs;
static_assert(GroupWide::kThreads == GroupNarrow::kThreads && GroupWide::kMinBlocks == 1 && GroupNarrow::kMinBlocks == 1,
              "one grid runs both widths");

// One CTA's tile through the rs mainloop of its width, and its stores.
template <class Cfg, class Maps>
__device__ __forceinline__ void run_group_tile_rs(uint8_t* smem, const GroupArgs& p, const GroupTile& gt, const Maps& maps) {
  static_assert(Cfg::kNB == 1 && Cfg::kWgStride == 1, "the grouped GEMM runs the GEMM tiles whose warpgroups take every stage");
  TileSrc src[2];
  group_rs_sources(p, gt, src);
  typename RsMainloop<Cfg>::Acc acc = {};
  if (!RsMainloop<Cfg>(smem).run(src, maps, 0, 0, p.k / Cfg::BK, acc)) return;
#pragma unroll
  for (int j = 0; j < Cfg::kSlabs; ++j)
    store_slab_rs(static_cast<__half*>(p.c), p.m, p.n, gt.row0, slab_col_rs<Cfg>(gt.col0, j), [&](int r) { return acc[j][r]; });
}

template <int G>
__global__ void __launch_bounds__(GroupNarrow::kThreads, 1)
    nvfp4_grouped_gemm_rs_kernel(const __grid_constant__ GroupedArgsOf<G> args, const __grid_constant__ GroupedRsMapsOf<G> maps) {
  extern __shared__ __align__(128) uint8_t smem[];
  const GroupRsTile gt = group_tile_rs(args);
  if (gt.wide) run_group_tile_rs<GroupWide>(smem, args.g[gt.g], gt, maps.g[gt.g]);
  else run_group_tile_rs<GroupNarrow>(smem, args.g[gt.g], gt, maps.g[gt.g]);
}

// Shared memory for the widths the grid has (launch_kernel_ex opts in to that size).
template <int G>
void launch_rs(const GroupedArgsOf<G>& args, const GroupedRsMapsOf<G>& maps, cudaStream_t stream) {
  launch_predequant_a_grouped(args, stream);
  const int smem = args.wide_tiles > 0 ? GroupWide::kSmemAlloc : GroupNarrow::kSmemAlloc;
  launch_kernel_ex(nvfp4_grouped_gemm_rs_kernel<G>, dim3(static_cast<unsigned>(args.total_tiles)), dim3(GroupNarrow::kThreads),
                   dim3(1, 1, 1), smem, stream, true, args, maps);
}

}  // namespace

template <int G>
bool make_group_maps(const GroupedArgsOf<G>& args, GroupedRsMapsOf<G>& maps) {
  for (int i = 0; i < args.groups; ++i)
    if (reinterpret_cast<uintptr_t>(args.g[i].b.scales) % 16 != 0) return false;
  for (int i = 0; i < args.groups; ++i) {
    const GroupArgs& g = args.g[i];
    constexpr uint32_t rows = kGroupBoxRows;
    maps.g[i].act = make_tma_a16(g.a16, g.m, g.k, 1, GemmM128N128Rs::BM);
    maps.g[i].data = make_tma_3d_u8(g.b.data, g.k / 2, g.n, 1, g.k / 2, g.b.data_batch, 64, rows, false);
    if (g.b.rk_blocks == 0)
      maps.g[i].scales = make_tma_3d_u8(g.b.scales, g.k / 16, g.n, 1, g.k / 16, g.b.scale_batch, 16, rows, false);
  }
  return true;
}
template bool make_group_maps(const GroupedArgsOf<kFewGroups>&, GroupedRsMapsOf<kFewGroups>&);
template bool make_group_maps(const GroupedArgs&, GroupedRsMapsOf<swapffn::nvfp4::kMaxGroups>&);

void launch_grouped_gemm(const GroupedArgs& args, Tile tile, cudaStream_t stream) {
  if (is_rs_tile(tile)) {
    bool launched = false;
    with_group_capacity(args, [&](const auto& a) {
      constexpr int G = std::decay_t<decltype(a)>::kCapacity;
      GroupedRsMapsOf<G> maps{};
      if (!make_group_maps(a, maps)) return;
      launch_rs(a, maps, stream);
      launched = true;
    });
    if (launched) return;
    // 128x128rs only (the API refuses 128x256rs with such scales): the fallback tiles the groups
    // the same way (128 x 128), so args' tile indices still hold.
    SWAPFFN_REQUIRE(tile == Tile::m128_n128_rs, "NVFP4 grouped GEMM: tile 128x256rs with weight scales TMA cannot copy");
    tile = Tile::m128_n128_wgmma;
  }
  dispatch_gemm_tile(tile, [&](auto cfg, auto path) {
    using Cfg = decltype(cfg);
    // The GEMM-only rs tiles are refused by the API.
    if constexpr (decltype(path)::value == Path::rs) {
      SWAPFFN_FAIL(std::string("NVFP4 grouped GEMM has no tile ") + swapffn::nvfp4::to_string(tile));
    } else {
      with_group_capacity(args, [&](const auto& a) {
        auto kernel = nvfp4_grouped_gemm_kernel<Cfg, decltype(path)::value, std::decay_t<decltype(a)>::kCapacity>;
        allow_dynamic_smem(kernel, Cfg::kSmemAlloc);
        kernel<<<static_cast<unsigned>(a.total_tiles), Cfg::kThreads, Cfg::kSmemAlloc, stream>>>(a);
        SWAPFFN_CHECK_LAUNCH();
      });
    }
  });
}

}  // namespace swapffn::cuda::nvfp4
