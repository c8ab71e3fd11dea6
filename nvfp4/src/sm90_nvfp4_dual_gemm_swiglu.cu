// NVFP4 gated dual GEMM on Hopper: c = fp16(silu(a b1^T) * (a b2^T)), silu and product in fp32,
// one rounding.
//
// Why it exists: the two products share A, so one CTA computes the same (m, n) tile of both from a
// single dequantized A tile (the tile mainloop with two B operands) and applies the SwiGLU in
// registers; neither product ever goes to memory (`128x64rs` exchanges half of each product's
// accumulators between its warpgroups through shared memory). Split-K, when chosen, reduces both partial
// products in a fixed order before the epilogue, so the result stays deterministic.
#include <cuda_fp16.h>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4_launch.hpp"
#include "nvfp4_tiles.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

__device__ __forceinline__ float swiglu(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

// The 64-row rs tile (`128x64rs`): consumer warpgroup 0 holds B1's accumulators, warpgroup 1 B2's
// at the same positions; after exchange_halves_rs each stores half of the tile. Called by the 256
// consumer threads.
template <class Cfg>
__device__ void store_swiglu_exchanged(uint8_t* smem, __half* c, int64_t m, int64_t n, int64_t row0, int64_t col,
                                       const float (&acc)[64]) {
  static_assert(Cfg::kConsumerThreads == 256 && Cfg::kSlabs == 1, "one slab per consumer warpgroup");
  float theirs[32];
  exchange_halves_rs(smem, acc, theirs);
  if (threadIdx.x < 128)
    store_slab_rs<0, 8>(c, m, n, row0, col, [&](int r) { return swiglu(acc[r], theirs[r]); });
  else
    store_slab_rs<8, 16>(c, m, n, row0, col, [&](int r) { return swiglu(theirs[r - 32], acc[r]); });
}

template <class Cfg, Path P>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    nvfp4_dual_gemm_swiglu_kernel(const GemmArgs args, const __grid_constant__ TmaParam<P> tma) {
  static_assert(Cfg::kNB == 2, "the dual GEMM needs a two-B tile configuration");
  extern __shared__ __align__(128) uint8_t smem[];
  const int m_tile = blockIdx.x, n_tile = blockIdx.y;
  const int batch = blockIdx.z / args.split_k, split = blockIdx.z % args.split_k;
  TileSrc src[3];
  src[0] = {args.a.data + batch * args.a.data_batch, args.a.scales + batch * args.a.scale_batch, args.m,
            static_cast<int64_t>(m_tile) * Cfg::BM, args.k, args.a.rk_blocks};
#pragma unroll
  for (int b = 0; b < 2; ++b)
    src[1 + b] = {args.b[b].data + batch * args.b[b].data_batch, args.b[b].scales + batch * args.b[b].scale_batch,
                  args.n, static_cast<int64_t>(n_tile) * Cfg::BN, args.k, args.b[b].rk_blocks};
  // Split boundaries on whole load units (kSplitUnit k-tiles; K % 256 == 0 makes the units divide K).
  const int units = static_cast<int>(args.k / (Cfg::BK * Cfg::kSplitUnit));
  const int kt0 = split * units / args.split_k * Cfg::kSplitUnit;
  const int kt1 = (split + 1) * units / args.split_k * Cfg::kSplitUnit;

  Acc<Cfg, P> acc = {};
  static_assert(sizeof(acc) == sizeof(float) * Cfg::kAcc, "split-K treats the accumulators as kAcc floats");
  if (!run_mainloop<Cfg, P>(smem, src, kt0, kt1 - kt0, acc, tma, batch)) return;

  if (args.split_k > 1) {
    const int64_t tile = (static_cast<int64_t>(batch) * gridDim.y + n_tile) * gridDim.x + m_tile;
    float* partials = args.partials + tile * args.split_k * Cfg::kAcc * Cfg::kAccThreads;
    if (!splitk_reduce<Cfg::kAcc, Cfg::kAccThreads>(reinterpret_cast<float*>(&acc), partials, args.counters + tile,
                                                     split, args.split_k))
      return;
  }
  __half* c = static_cast<__half*>(args.c) + batch * args.m * args.n;
  const int64_t row0 = static_cast<int64_t>(m_tile) * Cfg::BM, col0 = static_cast<int64_t>(n_tile) * Cfg::BN;
  if constexpr (P == Path::rs && Cfg::BN == 64)
    store_swiglu_exchanged<Cfg>(smem, c, args.m, args.n, row0, slab_col_rs<Cfg>(col0, 0), acc[0]);
  else if constexpr (P == Path::rs)
    store_slab_rs(c, args.m, args.n, row0, slab_col_rs<Cfg>(col0, 0), [&](int r) { return swiglu(acc[0][r], acc[1][r]); });
  else if constexpr (P != Path::mma_sync)
    store_tile_wg<Cfg::BN>(c, args.m, args.n, row0, col0, [&](int r) { return swiglu(acc[0][r], acc[1][r]); });
  else
    store_tile<Cfg>(c, args.m, args.n, row0, col0,
                    [&](int mt, int nt, int i) { return swiglu(acc[0][mt][nt][i], acc[1][mt][nt][i]); });
}

// Stream-K (TileConfig::stream_k, nvfp4_stream_k.cuh) over the `128x128rs` dual tile: one CTA per
// SM walks its range of the tiles' stages; a tile split across CTAs is summed in CTA order by the
// CTA of its first part (both products' partial sums, before the SwiGLU), which stores it.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    nvfp4_dual_gemm_swiglu_stream_k_kernel(const GemmArgs args, const __grid_constant__ TmaOperands tma) {
  static_assert(Cfg::kNB == 2 && Cfg::kSlabs == 2, "B1's and B2's slabs in every consumer warpgroup");
  extern __shared__ __align__(128) uint8_t smem[];
  run_stream_k_tiles<Cfg>(smem, args, tma, [&](__half* c, int64_t row0, int64_t col0, const auto& acc) {
    store_slab_rs(c, args.m, args.n, row0, slab_col_rs<Cfg>(col0, 0), [&](int r) { return swiglu(acc[0][r], acc[1][r]); });
  });
}

}  // namespace

void launch_dual_gemm_swiglu(const GemmArgs& args, Tile tile, cudaStream_t stream) {
  TmaOperands maps{};
  prepare_tma_tile(args, 2, tile, Tile::m128_n64_wgmma, maps, stream);
  if (args.stream_k > 0) {
    dispatch_dual_tile(tile, [&](auto cfg, auto path) {
      using Cfg = decltype(cfg);
      bool built = false;
      if constexpr (decltype(path)::value == Path::rs) {
        if constexpr (Cfg::kSlabs == 2) {
          launch_stream_k(nvfp4_dual_gemm_swiglu_stream_k_kernel<Cfg>, args, Cfg::kThreads, Cfg::kSmemAlloc,
                          stream_k_iters(args, Cfg::BM, Cfg::BN, Cfg::BK), maps, stream);
          built = true;
        }
      }
      if (!built)
        SWAPFFN_FAIL(std::string("NVFP4 dual GEMM: stream_k is not built for tile ") + swapffn::nvfp4::to_string(tile));
    });
    return;
  }
  dispatch_dual_tile(tile, [&](auto cfg, auto path) {
    using Cfg = decltype(cfg);
    constexpr Path P = decltype(path)::value;
    launch_tiles<Cfg, P>(nvfp4_dual_gemm_swiglu_kernel<Cfg, P>, args, maps, stream);
  });
}

}  // namespace swapffn::cuda::nvfp4
