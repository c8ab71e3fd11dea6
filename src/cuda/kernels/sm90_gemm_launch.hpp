// Host side of the Hopper GEMMs of the fused backend: problem arguments, the variant (tile N,
// pipeline stages, split-K) chosen by the caller, and the launch helper that sets the cluster
// shape, programmatic dependent launch and the dynamic shared-memory limit.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/launch.hpp"
#include "swapffn/bf16.hpp"

namespace swapffn::cuda {

// Kernel configuration of one GEMM (separate from the problem shape). split_k changes the
// floating-point summation order; bm, bn, stages and multicast do not.
struct GemmVariant {
  int bn = 128;
  int stages = 4;
  int split_k = 1;
  int multicast = 1;  // CTAs of a cluster sharing one operand tile (B for the dual GEMM, A for down)
  bool persistent = false;  // one CTA per SM walking the tiles (no cluster)
  int ctas_per_sm = 1;      // 2: two resident CTAs per SM, one's epilogue under the other's MMAs
  int bm = 128;             // tile rows: 128 (two consumer warpgroups), 64 (one) or 256 (two, 128 rows each)
  std::string name() const {
    return (bm != 128 ? "bm" + std::to_string(bm) + "_" : std::string()) + "bn" + std::to_string(bn) + "_st" +
           std::to_string(stages) + "_sk" + std::to_string(split_k) + "_mc" + std::to_string(multicast) +
           (persistent ? "_p" : "") + (ctas_per_sm > 1 ? "_o" + std::to_string(ctas_per_sm) : "");
  }
  bool operator==(const GemmVariant&) const = default;
};

// Whether a down GEMM variant's tiles fit the model's shape (the launcher refuses the others): N = D
// in whole (multicast) tiles and K = F in whole 64-k steps of every split. (Every dual GEMM variant
// fits any model the fused backend runs: its last weight tile may be partial.)
inline bool down_variant_fits(const GemmVariant& v, int64_t d_model, int64_t d_ff) {
  return d_model % (int64_t{v.bn} * v.multicast) == 0 && d_ff % (int64_t{64} * v.split_k) == 0;
}

// u[M, F] = silu(A W1^T) * (A W3^T), with W13 the interleaved [2F, K] weights (interleave_w13).
struct DualGemmSwigluArgs {
  const __nv_bfloat16* a;    // [M, K]
  const __nv_bfloat16* w13;  // [2F, K]
  __nv_bfloat16* u;          // [M, F]
  int m, n2, k;              // n2 = 2F
};

// h[M, N] (+)= A[M, K] W2[N, K]^T
struct GemmResidualArgs {
  const __nv_bfloat16* a;  // [M, K]
  const __nv_bfloat16* w;  // [N, K]
  float* h;                // [M, N]
  int m, n, k;
  bool residual;
};

// Both launchers encode their tensor maps (cheap host work) and check shapes against the variant.
void launch_dual_gemm_swiglu(const DualGemmSwigluArgs& a, const GemmVariant& v, cudaStream_t stream, bool pdl);
void launch_gemm_residual(const GemmResidualArgs& a, const GemmVariant& v, cudaStream_t stream, bool pdl);

// What a GEMM kernel runs: the GEMM, or one of its halves, to split its time between moving the
// operands and computing on them (diagnostics for `swapffn tune`, never the engine). operands_only:
// the producer's loads as in the GEMM, each stage released as soon as it lands, no MMA, no
// epilogue. mma_only: no loads (the MMAs read whatever the stage buffers hold), then the epilogue.
enum class GemmFeed { gemm, operands_only, mma_only };
// The variants with diagnostic builds (the engine's defaults at small and large M, no clusters), and
// their launchers for a feed other than gemm (outputs are garbage; timing only), launched as
// programmatic dependents as the engine launches the GEMMs, so back-to-back timings compare.
std::vector<GemmVariant> dual_gemm_feed_variants();
std::vector<GemmVariant> down_gemm_feed_variants();
void launch_dual_gemm_swiglu_feed(const DualGemmSwigluArgs& a, const GemmVariant& v, GemmFeed feed, cudaStream_t stream);
void launch_gemm_residual_feed(const GemmResidualArgs& a, const GemmVariant& v, GemmFeed feed, cudaStream_t stream);

// A variant's two diagnostic builds, for a launcher's table of them.
template <class Args>
struct GemmFeedEntry {
  GemmVariant v;
  void (*operands_only)(const Args&, cudaStream_t, bool);
  void (*mma_only)(const Args&, cudaStream_t, bool);
};

// For the launchers' tables of compiled variants (entries with a GemmVariant v): the variants, and
// the diagnostic launch of one (GemmFeedEntry tables).
template <class Entry, size_t N>
std::vector<GemmVariant> variants_of(const Entry (&table)[N]) {
  std::vector<GemmVariant> out;
  for (const auto& e : table) out.push_back(e.v);
  return out;
}
template <class Entry, size_t N, class Args>
void launch_feed_of(const Entry (&table)[N], const Args& a, const GemmVariant& v, GemmFeed feed, cudaStream_t stream,
                    const std::string& gemm) {
  SWAPFFN_REQUIRE(feed != GemmFeed::gemm, gemm + ": the gemm feed has its own launcher");
  for (const auto& e : table)
    if (e.v == v) return (feed == GemmFeed::operands_only ? e.operands_only : e.mma_only)(a, stream, true);
  SWAPFFN_FAIL(gemm + ": no diagnostic build of variant " + v.name());
}

// The dual GEMM's B operand: w1 [F, K] and w3 [F, K] interleaved in blocks of 8 rows into [2F, K]
// (rows 16g..16g+7 = w1[8g..8g+7], rows 16g+8..16g+15 = w3[8g..8g+7]). F must be a multiple of 8.
std::vector<bf16> interleave_w13(const std::vector<bf16>& w1, const std::vector<bf16>& w3, int64_t f, int64_t k);

// Clusters (CTAs without a cluster) of a down GEMM variant that are resident at once on this GPU.
int down_gemm_clusters_per_wave(const GemmVariant& v);

// The variants compiled into this build (the tuner's search space).
std::vector<GemmVariant> dual_gemm_variants();
std::vector<GemmVariant> down_gemm_variants();

}  // namespace swapffn::cuda
