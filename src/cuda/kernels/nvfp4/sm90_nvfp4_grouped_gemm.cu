// NVFP4 grouped GEMM on Hopper: G independent problems (m_i, n_i, k_i), one launch.
//
// Why it exists: the groups' m_i are small and not multiples of 128 (MoE-style token counts), so
// launching G GEMMs would leave most SMs idle between launches and pay G launch latencies. One
// flat grid covers every group's output tiles; a CTA finds its group by scanning the groups' first
// tile indices (G <= 64, passed by value in the kernel parameters, so no setup copy is needed).
// Within a group the m tiles of one n tile are adjacent in launch order, so they run together and
// the group's B tile is read from HBM once and re-read from L2.
#include <cuda_fp16.h>

#include "cuda/cuda_check.hpp"
#include "cuda/kernels/nvfp4/nvfp4_launch.hpp"
#include "cuda/kernels/nvfp4/nvfp4_tiles.cuh"

namespace swapffn::cuda::nvfp4 {

namespace {

template <class Cfg, Path P>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks) nvfp4_grouped_gemm_kernel(const __grid_constant__ GroupedArgs args) {
  extern __shared__ __align__(128) uint8_t smem[];
  int g = 0;
  while (g + 1 < args.groups && static_cast<int>(blockIdx.x) >= args.g[g + 1].tile_begin) ++g;
  const GroupArgs& p = args.g[g];
  const int local = static_cast<int>(blockIdx.x) - p.tile_begin;
  const int m_tile = local % p.tiles_m, n_tile = local / p.tiles_m;
  TileSrc src[2];
  src[0] = {p.a.data, p.a.scales, p.m, static_cast<int64_t>(m_tile) * Cfg::BM, p.k, p.a.rk_blocks};
  src[1] = {p.b.data, p.b.scales, p.n, static_cast<int64_t>(n_tile) * Cfg::BN, p.k, p.b.rk_blocks};

  const int64_t row0 = static_cast<int64_t>(m_tile) * Cfg::BM, col0 = static_cast<int64_t>(n_tile) * Cfg::BN;
  __half* c = static_cast<__half*>(p.c);
  Acc<Cfg, P> acc = {};
  if (!run_mainloop<Cfg, P>(smem, src, 0, p.k / Cfg::BK, acc, {}, 0)) return;
  if constexpr (P != Path::mma_sync)
    store_tile_wg<Cfg::BN>(c, p.m, p.n, row0, col0, [&](int r) { return acc[0][r]; });
  else
    store_tile<Cfg>(c, p.m, p.n, row0, col0, [&](int mt, int nt, int i) { return acc[0][mt][nt][i]; });
}

}  // namespace

void launch_grouped_gemm(const GroupedArgs& args, Tile tile, cudaStream_t stream) {
  dispatch_gemm_tile(tile, [&](auto cfg, auto path) {
    using Cfg = decltype(cfg);
    // The TMA tiles are refused by the API (their tensor maps are per operand, up to 128 here).
    if constexpr (decltype(path)::value == Path::wst || decltype(path)::value == Path::rs) {
      SWAPFFN_FAIL(std::string("NVFP4 grouped GEMM has no tile ") + swapffn::nvfp4::to_string(tile));
    } else {
      auto kernel = nvfp4_grouped_gemm_kernel<Cfg, decltype(path)::value>;
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemAlloc));
      kernel<<<static_cast<unsigned>(args.total_tiles), Cfg::kThreads, Cfg::kSmemAlloc, stream>>>(args);
      SWAPFFN_CHECK_LAUNCH();
    }
  });
}

}  // namespace swapffn::cuda::nvfp4
