// FFN down-projection of the fused backend through CUTLASS's sm90 warp-specialised GEMM kernels:
// h = u W2^T + beta h (beta = 1 with the residual, 0 without), bf16 operands, fp32 accumulation and h.
// Why it exists: ten sessions of our own mainloops (sm90_bf16_gemm_residual.cu) stayed 15-30% behind
// cuBLAS's nvjet kernels at M = 512, and cuBLAS's kernels cannot join the programmatic-dependent-
// launch chain of the step. CUTLASS's kernels are the family nvjet's come from (TMA + mbarrier rings,
// pingpong or cooperative consumer warpgroups, cluster multicast), and built with
// CUTLASS_ENABLE_GDC_FOR_SM90 they wait for their predecessor (griddepcontrol.wait) before any global
// load and release their dependents when their last tile's MMAs are done. No variant splits K: each
// output is one chain of k16 MMAs in k order, the summation order of our sk1 kernels and of cuBLAS's
// batch-invariant algorithms (tested bitwise), so the tile and cluster may follow the batch size.
#define CUTLASS_ENABLE_GDC_FOR_SM90 1

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <string>
#include <vector>

#include "cuda/kernels/sm90_bf16_gemm_residual_cutlass.hpp"
#include "cuda/runtime/launch.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

using namespace cute;

// One compiled configuration: tile (BM x BN x 64), cluster CM x CN (CM CTAs along M share each W2
// tile by multicast, CN along N each u tile) and the consumer schedule (pingpong: two warpgroups
// alternate whole tiles, one's epilogue under the other's MMAs; cooperative: both split one tile's
// rows).
template <int BM, int BN, int CM, int CN, bool Pingpong>
struct CutlassResidualGemm {
  using TileShape = Shape<Int<BM>, Int<BN>, _64>;
  using ClusterShape = Shape<Int<CM>, Int<CN>, _1>;
  using KernelSchedule = std::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                            cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using EpilogueSchedule = std::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                              cutlass::epilogue::TmaWarpSpecializedCooperative>;
  static_assert(Pingpong || BM >= 128, "the cooperative schedule splits a tile's rows over two warpgroups: BM >= 128");
  static_assert((CM == 1 || CM == 2) && (CN == 1 || CN == 2), "clusters of 1 or 2 CTAs along M and along N");

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, float, cutlass::layout::RowMajor, 4, float,
      cutlass::layout::RowMajor, 4, EpilogueSchedule>::CollectiveOp;
  // u [M, K] row-major (K-major A); W2 [N, K] row-major is the K-major (column-major) B.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static void run(const GemmResidualArgs& a, int sm_count, cudaStream_t stream, bool pdl) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    const auto* u = reinterpret_cast<const cutlass::bfloat16_t*>(a.a);
    const auto* w = reinterpret_cast<const cutlass::bfloat16_t*>(a.w);
    cutlass::KernelHardwareInfo hw;
    hw.sm_count = sm_count;
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {a.m, a.n, a.k, 1},
                                  {u, cutlass::make_cute_packed_stride(StrideA{}, {a.m, a.k, 1}), w,
                                   cutlass::make_cute_packed_stride(StrideB{}, {a.n, a.k, 1})},
                                  {{1.f, a.residual ? 1.f : 0.f},
                                   a.h,
                                   cutlass::make_cute_packed_stride(StrideC{}, {a.m, a.n, 1}),
                                   a.h,
                                   cutlass::make_cute_packed_stride(StrideC{}, {a.m, a.n, 1})},
                                  hw};
    Gemm gemm;
    SWAPFFN_REQUIRE(Gemm::get_workspace_size(args) == 0,
                    "CUTLASS down GEMM: this configuration wants a workspace (none is provided)");
    const cutlass::Status ok = gemm.can_implement(args);
    SWAPFFN_REQUIRE(ok == cutlass::Status::kSuccess,
                    std::string("CUTLASS down GEMM cannot run M = ") + std::to_string(a.m) + ", N = " + std::to_string(a.n) +
                        ", K = " + std::to_string(a.k) + ": " + cutlassGetStatusString(ok) +
                        " (K and N must be multiples of 8, N of 4 for the fp32 h)");
    const cutlass::Status init = gemm.initialize(args, nullptr, stream);
    SWAPFFN_REQUIRE(init == cutlass::Status::kSuccess,
                    std::string("CUTLASS down GEMM: initialize failed: ") + cutlassGetStatusString(init));
    const cutlass::Status run = gemm.run(stream, nullptr, pdl);
    SWAPFFN_REQUIRE(run == cutlass::Status::kSuccess, std::string("CUTLASS down GEMM: launch failed: ") + cutlassGetStatusString(run));
    CUDA_CHECK(cudaGetLastError());
  }
};

struct Entry {
  const char* name;
  void (*fn)(const GemmResidualArgs&, int, cudaStream_t, bool);
};

// cuBLAS's pinned algorithm at M = 512 is nvjet tss_64x64_64x13_2x1: 64 x 64 tiles and a 2 x 1
// cluster in cuBLAS's column-major view, where M is our N, so in ours pp_64x64_c1x2 (the u tile
// multicast to two W2 tiles). It runs 14.9 us there against nvjet's 13.2-13.4 (H100): CUTLASS's
// kernels are level with our own mainloops, not with nvjet. The cooperative 128-row tiles are for
// large M (the wide tile halves the operand bytes per output): 128 x 256 107-110 us at M = 8192,
// level with the pinned cuBLAS GEMM. Dropped after measuring (docs/PERF.md, eighteenth session):
// pp_64x64 with 1 x 1 (14.9 us), 2 x 1 (15.1) and 2 x 2 clusters (19.3), pp_64x128_c2x1 (15.8), and
// co_128x256_c1x2 (the same as 2 x 1).
constexpr Entry kVariants[] = {
    {"pp_64x64_c1x2", &CutlassResidualGemm<64, 64, 1, 2, true>::run},
    {"co_128x128_c2x1", &CutlassResidualGemm<128, 128, 2, 1, false>::run},
    {"co_128x256_c2x1", &CutlassResidualGemm<128, 256, 2, 1, false>::run},
};

}  // namespace

std::vector<std::string> cutlass_down_variants() {
  std::vector<std::string> out;
  for (const auto& e : kVariants) out.push_back(e.name);
  return out;
}

bool is_cutlass_down_variant(const std::string& name) {
  for (const auto& e : kVariants)
    if (name == e.name) return true;
  return false;
}

void launch_cutlass_gemm_residual(const GemmResidualArgs& a, const std::string& variant, cudaStream_t stream, bool pdl) {
  if (a.m == 0) return;
  for (const auto& e : kVariants)
    if (variant == e.name) return e.fn(a, sm_count(), stream, pdl);
  std::string names;
  for (const auto& e : kVariants) names += (names.empty() ? "" : ", ") + std::string(e.name);
  SWAPFFN_FAIL("CUTLASS down GEMM: no compiled variant '" + variant + "' (" + names + ")");
}

}  // namespace swapffn::cuda
