// The data-path probe of the rs tiles (TileConfig::probe): a GEMM or dual GEMM grid that runs only
// its stage copies.
//
// Why it exists: the rs tiles' stage time is set by their data path, not by the MMA or the
// conversion (docs/NVFP4.md, twenty-third and twenty-seventh steps), and what limits that path (an
// aggregate L2-to-shared-memory rate, the box shapes, the activations' bytes) could only be
// inferred from ablations of the whole kernel. This grid issues the production producer's copies
// (RsMainloop::produce, the same ring and barriers) to consumers that only release each stage, so
// the bench can time the copies alone, or a subset of them, on the shapes and grids of the kernels.
// Two more split the fixed cost under every probe: the activations' pre-pass alone, and the same
// grid with CTAs that return at once (what its launch costs). One asks what a deeper ring would give
// the weights: their copies alone through weight-only stages that fill the whole ring's shared
// memory. The grouped GEMM's rs grid runs the same probes.
#include <type_traits>

#include "cuda/runtime/cuda_check.hpp"
#include "nvfp4/nvfp4_launch.hpp"
#include "nvfp4/nvfp4_tiles.cuh"
#include "cuda/runtime/launch.hpp"

namespace swapffn::cuda::nvfp4 {

namespace {

// Probe::weight_ring: the tile's ring re-cut into weight-only stages (weight rows and scales at the
// same offsets from the stage start, no activation boxes) in the same shared memory, a whole number
// of stages per consumer warpgroup. Only the copies and the hand-offs read these members.
template <class Base>
struct WeightRingCfg : Base {
  static constexpr int kActBytes = 0;
  static constexpr int kStageBytes = Base::kWeightBytes + Base::kScaleBytes;
  static constexpr int kStages = Base::kStages * Base::kStageBytes / kStageBytes / Base::kWgStride * Base::kWgStride;
  static constexpr int kSmemAlloc = kStages * kStageBytes + 2 * kStages * 8 + 1024;
  static_assert(kStageBytes % 1024 == 0, "weight-only stages stay 1024-byte aligned");
  static_assert(kSmemAlloc <= Base::kSmemAlloc, "the weight ring takes no more shared memory than the tile's ring");
};

template <class Cfg, unsigned Copies>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    nvfp4_rs_probe_kernel(const GemmArgs args, const __grid_constant__ TmaOperands tma) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int m_tile = blockIdx.x, n_tile = blockIdx.y;
  const int batch = blockIdx.z / args.split_k, split = blockIdx.z % args.split_k;
  TileSrc src[1 + Cfg::kNB];
  // The activations' fp16 copy: through its tensor map, or (kCopyActBulk) as flat 32 KB blocks.
  src[0] = {args.a16 + batch * args.m * args.k * 2, nullptr, args.m, static_cast<int64_t>(m_tile) * Cfg::BM, args.k, 0};
#pragma unroll
  for (int b = 0; b < Cfg::kNB; ++b)
    src[1 + b] = {args.b[b].data + batch * args.b[b].data_batch, args.b[b].scales + batch * args.b[b].scale_batch,
                  args.n, static_cast<int64_t>(n_tile) * Cfg::BN, args.k, args.b[b].rk_blocks};
  static_assert(Cfg::kSplitUnit == 1, "rs split-K boundaries are whole stages");
  const int stages = static_cast<int>(args.k / Cfg::BK);
  const int kt0 = split * stages / args.split_k, kt1 = (split + 1) * stages / args.split_k;
  RsMainloop<Cfg>(smem).template run_probe<Copies>(src, tma, batch, kt0, kt1 - kt0);
}

// The grouped GEMM's grid (sm90_nvfp4_grouped_gemm.cu): each CTA's tile of its group.
template <class Cfg, unsigned Copies, int G>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    nvfp4_grouped_rs_probe_kernel(const __grid_constant__ GroupedArgsOf<G> args, const __grid_constant__ GroupedRsMapsOf<G> maps) {
  extern __shared__ __align__(128) uint8_t smem[];
  const GroupTile gt = group_tile<Cfg>(args);
  const GroupArgs& p = args.g[gt.g];
  TileSrc src[2];
  group_rs_sources(p, gt, src);
  RsMainloop<Cfg>(smem).template run_probe<Copies>(src, maps.g[gt.g], 0, 0, p.k / Cfg::BK);
}

// Probe::launch: the same grid, block, shared memory and launch attributes; every CTA returns at once.
template <class Cfg, class... Params>
__global__ void __launch_bounds__(Cfg::kThreads, 1) nvfp4_rs_empty_kernel(const Params...) {}

template <class Cfg, unsigned Copies, bool kEmpty = false>
void launch(const GemmArgs& args, const TmaOperands& maps, cudaStream_t stream) {
  auto kernel = kEmpty ? nvfp4_rs_empty_kernel<Cfg, GemmArgs, TmaOperands> : nvfp4_rs_probe_kernel<Cfg, Copies>;
  const dim3 grid(static_cast<unsigned>((args.m + Cfg::BM - 1) / Cfg::BM), static_cast<unsigned>((args.n + Cfg::BN - 1) / Cfg::BN),
                  static_cast<unsigned>(args.l * args.split_k));
  launch_kernel_ex(kernel, grid, dim3(Cfg::kThreads), dim3(1, 1, 1), Cfg::kSmemAlloc, stream, Cfg::kPreA, args, maps);
}

template <class Cfg, unsigned Copies, bool kEmpty = false, int G>
void launch_grouped(const GroupedArgsOf<G>& args, const GroupedRsMapsOf<G>& maps, cudaStream_t stream) {
  auto kernel = kEmpty ? nvfp4_rs_empty_kernel<Cfg, GroupedArgsOf<G>, GroupedRsMapsOf<G>>
                       : nvfp4_grouped_rs_probe_kernel<Cfg, Copies, G>;
  launch_kernel_ex(kernel, dim3(static_cast<unsigned>(args.total_tiles)), dim3(Cfg::kThreads), dim3(1, 1, 1), Cfg::kSmemAlloc,
                   stream, Cfg::kPreA, args, maps);
}

[[noreturn]] void no_grid(swapffn::nvfp4::Probe probe) {
  SWAPFFN_FAIL(std::string("NVFP4 probe=") + swapffn::nvfp4::to_string(probe) + " launches no grid here");
}

}  // namespace

void launch_rs_probe(const GemmArgs& args, Tile tile, int nb, swapffn::nvfp4::Probe probe, cudaStream_t stream) {
  using swapffn::nvfp4::Probe;
  TmaOperands maps{};
  Tile prepared = tile;
  if (probe != Probe::launch) prepare_tma_tile(args, nb, prepared, tile, maps, stream);  // the pre-pass and the maps; no fallback (API-checked)
  if (probe == Probe::prepass) return;
  auto run = [&](auto cfg, auto path) {
    using Cfg = decltype(cfg);
    if constexpr (decltype(path)::value == Path::rs) {
      switch (probe) {
        case Probe::stages: launch<Cfg, kCopyAll>(args, maps, stream); return;
        case Probe::activations: launch<Cfg, kCopyActBoxes>(args, maps, stream); return;
        case Probe::weights: launch<Cfg, kCopyWeights>(args, maps, stream); return;
        case Probe::bulk_activations: launch<Cfg, kCopyActBulk | kCopyWeights>(args, maps, stream); return;
        case Probe::ring: launch<Cfg, 0u>(args, maps, stream); return;
        case Probe::launch: launch<Cfg, 0u, true>(args, maps, stream); return;
        case Probe::weight_ring: launch<WeightRingCfg<Cfg>, kCopyWeights>(args, maps, stream); return;
        case Probe::prepass:
        case Probe::none: break;
      }
      no_grid(probe);
    } else {
      SWAPFFN_FAIL(std::string("NVFP4 probe: tile ") + swapffn::nvfp4::to_string(tile) + " is not an rs tile");
    }
  };
  if (nb == 1) dispatch_gemm_tile(tile, run);
  else dispatch_dual_tile(tile, run);
}

void launch_grouped_rs_probe(const GroupedArgs& all, Tile tile, swapffn::nvfp4::Probe probe, cudaStream_t stream) {
  using swapffn::nvfp4::Probe;
  SWAPFFN_REQUIRE(tile == Tile::m128_n128_rs || tile == Tile::m128_n256_rs,
                  std::string("NVFP4 grouped probe: tile ") + swapffn::nvfp4::to_string(tile) + " is not a grouped rs tile");
  // The same parameter block as the grouped GEMM's launch (with_group_capacity).
  with_group_capacity(all, [&](const auto& args) {
    constexpr int G = std::decay_t<decltype(args)>::kCapacity;
    GroupedRsMapsOf<G> maps{};
    if (probe != Probe::launch) {
      SWAPFFN_REQUIRE(make_group_maps(args, maps), "NVFP4 grouped probe: a group's weight scales are not 16-byte aligned");
      launch_predequant_a_grouped(args, stream);
    }
    if (probe == Probe::prepass) return;
    auto run = [&](auto cfg) {
      using Cfg = decltype(cfg);
      switch (probe) {
        case Probe::stages: launch_grouped<Cfg, kCopyAll>(args, maps, stream); return;
        case Probe::activations: launch_grouped<Cfg, kCopyActBoxes>(args, maps, stream); return;
        case Probe::weights: launch_grouped<Cfg, kCopyWeights>(args, maps, stream); return;
        case Probe::weight_ring: launch_grouped<WeightRingCfg<Cfg>, kCopyWeights>(args, maps, stream); return;
        case Probe::ring: launch_grouped<Cfg, 0u>(args, maps, stream); return;
        case Probe::launch: launch_grouped<Cfg, 0u, true>(args, maps, stream); return;
        case Probe::prepass:
        case Probe::bulk_activations:
        case Probe::none: break;
      }
      no_grid(probe);
    };
    if (tile == Tile::m128_n256_rs) run(GemmM128N256Rs{});
    else run(GemmM128N128Rs{});
  });
}

}  // namespace swapffn::cuda::nvfp4
