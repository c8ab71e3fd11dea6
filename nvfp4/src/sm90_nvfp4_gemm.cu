// NVFP4 block-scaled GEMM on Hopper: c[m, n, l] = fp16(sum_k a[m,k,l] b[n,k,l]) with e2m1 data and
// e4m3 scales per 16 k.
//
// Why it exists: Hopper tensor cores have no FP4 mode; the kernel dequantizes both operands exactly
// into fp16 (A once by a pre-pass, B in the MMA warps' registers: nvfp4_rs_mainloop.cuh; or both
// into shared-memory tiles: nvfp4_tile_mainloop.cuh) and multiplies them on the fp16 tensor cores,
// so results equal the FP4 reference bit for bit wherever fp32 sums are exact. The competition's shapes
// have M = 128 and large N, K: few output tiles, so split-K (fixed-order reduction) fills the SMs.
#include <cuda_fp16.h>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_launch.hpp"
#include "nvfp4_tiles.cuh"
#include "cuda/runtime/launch.hpp"
#include "cuda/runtime/tma.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

template <class Cfg, Path P>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    nvfp4_gemm_kernel(const GemmArgs args, const __grid_constant__ TmaParam<P> tma) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int m_tile = blockIdx.x, n_tile = blockIdx.y;
  const int batch = blockIdx.z / args.split_k, split = blockIdx.z % args.split_k;
  TileSrc src[2];
  src[0] = {args.a.data + batch * args.a.data_batch, args.a.scales + batch * args.a.scale_batch, args.m,
            static_cast<int64_t>(m_tile) * Cfg::BM, args.k, args.a.rk_blocks};
  src[1] = {args.b[0].data + batch * args.b[0].data_batch, args.b[0].scales + batch * args.b[0].scale_batch,
            args.n, static_cast<int64_t>(n_tile) * Cfg::BN, args.k, args.b[0].rk_blocks};
  // Split boundaries on whole load units (kSplitUnit k-tiles; K % 256 == 0 makes the units divide K).
  const int units = static_cast<int>(args.k / (Cfg::BK * Cfg::kSplitUnit));
  const int kt0 = split * units / args.split_k * Cfg::kSplitUnit;
  const int kt1 = (split + 1) * units / args.split_k * Cfg::kSplitUnit;

  Acc<Cfg, P> acc = {};
  if (!run_mainloop<Cfg, P>(smem, src, kt0, kt1 - kt0, acc, tma, batch)) return;

  const int64_t tile = (static_cast<int64_t>(batch) * gridDim.y + n_tile) * gridDim.x + m_tile;
  const int64_t partial0 = tile * args.split_k * Cfg::kAcc * Cfg::kAccThreads;  // the tile's split-K partials
  __half* c = static_cast<__half*>(args.c) + batch * args.m * args.n;
  const int64_t row0 = static_cast<int64_t>(m_tile) * Cfg::BM, col0 = static_cast<int64_t>(n_tile) * Cfg::BN;
  if constexpr (wg_stride<Cfg>() == 2) {
    // K split across the warpgroups: each adds the other's partial sums to the half of the tile
    // it stores (warpgroup 0's sum first, a fixed order), then split-K reduces those halves.
    static_assert(Cfg::kAcc == 32, "each warpgroup keeps the sums of half of its 64 positions");
    float theirs[32], sum[32];
    exchange_halves_rs(smem, acc[0], theirs);
    const bool first = threadIdx.x < 128;
#pragma unroll
    for (int r = 0; r < 32; ++r) sum[r] = first ? acc[0][r] + theirs[r] : theirs[r] + acc[0][32 + r];
    if (args.split_k > 1 &&
        !splitk_reduce<Cfg::kAcc, Cfg::kAccThreads>(sum, args.partials + partial0, args.counters + tile, split,
                                                    args.split_k))
      return;
    const int64_t col = slab_col_rs<Cfg>(col0, 0);
    if (first) store_slab_rs<0, 8>(c, args.m, args.n, row0, col, [&](int r) { return sum[r]; });
    else store_slab_rs<8, 16>(c, args.m, args.n, row0, col, [&](int r) { return sum[r - 32]; });
    return;
  } else {
    static_assert(sizeof(acc) == sizeof(float) * Cfg::kAcc, "split-K treats the accumulators as kAcc floats");
    if (args.split_k > 1 && !splitk_reduce<Cfg::kAcc, Cfg::kAccThreads>(reinterpret_cast<float*>(&acc), args.partials + partial0,
                                                                         args.counters + tile, split, args.split_k))
      return;
  }
  if constexpr (P == Path::rs) {
#pragma unroll
    for (int j = 0; j < Cfg::kSlabs; ++j)
      store_slab_rs(c, args.m, args.n, row0, slab_col_rs<Cfg>(col0, j), [&](int r) { return acc[j][r]; });
  } else if constexpr (P != Path::mma_sync) {
    store_tile_wg<Cfg::BN>(c, args.m, args.n, row0, col0, [&](int r) { return acc[0][r]; });
  } else {
    store_tile<Cfg>(c, args.m, args.n, row0, col0, [&](int mt, int nt, int i) { return acc[0][mt][nt][i]; });
  }
}

}  // namespace

int tile_threads(Tile tile, bool dual) {
  int t = 0;
  if (dual) dispatch_dual_tile(tile, [&](auto cfg, auto) { t = decltype(cfg)::kAccThreads; });
  else dispatch_gemm_tile(tile, [&](auto cfg, auto) { t = decltype(cfg)::kAccThreads; });
  return t;
}

int tile_acc_per_thread(Tile tile, bool dual) {
  int n = 0;
  if (dual) dispatch_dual_tile(tile, [&](auto cfg, auto) { n = decltype(cfg)::kAcc; });
  else dispatch_gemm_tile(tile, [&](auto cfg, auto) { n = decltype(cfg)::kAcc; });
  return n;
}

void prepare_tma_tile(const GemmArgs& args, int nb, Tile& tile, Tile fallback, TmaOperands& maps, cudaStream_t stream) {
  if (!is_rs_tile(tile)) return;
  const uint32_t rows = static_cast<uint32_t>(swapffn::nvfp4::tile_n(tile));  // B rows per box
  for (int o = 1; o <= nb; ++o)
    if (reinterpret_cast<uintptr_t>(args.b[o - 1].scales) % 16 != 0) {
      tile = fallback;
      return;
    }
  // The weights' raw rows in unswizzled 64-byte (128-k) boxes of the tile's weight rows; plain
  // scales in 16-byte boxes (two stages' worth) (nvfp4_rs_mainloop.cuh).
  for (int o = 1; o <= nb; ++o) {
    const OperandArgs& b = args.b[o - 1];
    maps.data[o] = make_tma_3d_u8(b.data, args.k / 2, args.n, args.l, args.k / 2, b.data_batch, 64, rows, false);
    if (b.rk_blocks == 0)
      maps.scales[o] = make_tma_3d_u8(b.scales, args.k / 16, args.n, args.l, args.k / 16, b.scale_batch, 16, rows, false);
  }
  maps.data[0] = make_tma_a16(args.a16, args.m, args.k, args.l, 128);  // encoded (and refused, if it must be) before anything launches
  launch_predequant_a(args, stream);
}

void launch_gemm(const GemmArgs& args, Tile tile, cudaStream_t stream) {
  TmaOperands maps{};
  prepare_tma_tile(args, 1, tile, Tile::m128_n128_wgmma, maps, stream);
  dispatch_gemm_tile(tile, [&](auto cfg, auto path) {
    using Cfg = decltype(cfg);
    constexpr Path P = decltype(path)::value;
    launch_tiles<Cfg, P>(nvfp4_gemm_kernel<Cfg, P>, args, maps, stream);
  });
}

}  // namespace swapffn::cuda::nvfp4
