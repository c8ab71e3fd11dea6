// Kernel configuration of the fused backend, kept apart from the problem (Config, batch size) and
// chosen in one place: select_fused_config(). See the .cpp for the reasons and rejected options.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels/event_router.hpp"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "swapffn/config.hpp"

namespace swapffn::cuda {

struct FusedKernelConfig {
  GemmVariant up{256, 4, 1, 1};  // SwiGLU dual GEMM [M, D] x [2F, D]^T
  // Residual GEMM [M, F] x [D, F]^T (h += u W2^T): our sm90 kernel with this variant, or, when
  // down_cublas, cuBLASLt with beta = 1 (batch-invariant algorithms, as in the unfused backend).
  GemmVariant down{64, 6, 2, 1};
  bool down_cublas = true;
  // When set (and not down_cublas): the down GEMM through CUTLASS's sm90 kernels, this variant
  // (sm90_bf16_gemm_residual_cutlass.hpp), instead of `down`. It does not split K.
  std::string down_cutlass;
  bool pdl = true;                // programmatic dependent launch for the GEMMs
  // Event head: "folded" = the folded event router (folded_event_router.hpp: the router projection
  // folded into five vectors at load); "event" = the one-kernel MMA event router (event_router.cu);
  // "cublas" = RMSNorm (fused into the previous kernel) + cuBLASLt router GEMM + the decision/swap
  // kernel. The built-in default depends on the model shape (select_fused_config).
  std::string router = "cublas";
  // Rows per event-router CTA ("router_grid"; automatic: by rows per SM; only with router "event").
  // Every grid gives the same bits, so it may vary with the batch size.
  RouterGrid router_grid = RouterGrid::automatic;
  // Rows per FFN chunk (0: all rows at once). Each chunk runs both FFN steps of an event before the
  // next chunk starts, so its [rows, F] intermediate and its h stay in L2 at large batch sizes.
  // Rows are independent: the chunking changes no row's arithmetic.
  int64_t row_chunk = 0;
  // Row groups ("groups"; 1: none; 0 until select_fused_config resolves "auto", its default). The
  // rows split into this many groups of whole 64-row blocks; each group runs its events (router,
  // FFN steps, chunked by row_chunk) on its own stream inside the step's graph, forked after the
  // FiLM kernel and joined before the collapse, so that one group's router, RMSNorm and kernel
  // boundaries run while another group's GEMMs hold the SMs.
  // Rows are independent: no row's arithmetic changes, so the count may follow the batch size.
  // Needs router "folded" or "event" (the cuBLAS router's GEMM runs over all rows).
  int row_groups = 0;
  // Keep W13 and W2 in L2 for the whole step ("l2_weights"): this fraction of their lines (0: no
  // window) in an access-policy window with persisting hits, on a carve-out of L2 set aside while
  // the engine lives (cuda/l2_window.hpp). Caching only: no output bit changes.
  double l2_weights = 0;
};

// The first row and the row count of each group when `rows` rows split into `groups` groups: whole
// 64-row blocks (the GEMMs' M tiles are 64 or 128 rows), at most `groups`, none empty.
std::vector<std::pair<int64_t, int64_t>> row_group_ranges(int64_t rows, int groups);

// Throws naming the first dimension the fused kernels cannot run (before any allocation).
void check_fused_supports(const Config& cfg);

// The configuration for `batch` sequences: the tuning cache's entry for this device, model shape
// and batch when tune_file names one (written by `swapffn tune`), else the built-in default.
// kernel_config ("up=<variant>,down=<variant>|<cutlass variant>|cublas|sk2|sk4,router=folded|event|cublas,
// router_grid=<grid>,chunk=<rows>,groups=auto|<1..8>,pdl=0|1,l2_weights=<0..1>", each part optional) overrides;
// sk<N>: our down GEMM with split-K N, its tile width chosen for the batch size; pdl: programmatic
// dependent launch of our kernels and CUTLASS's (on by default).
FusedKernelConfig select_fused_config(const Config& cfg, int64_t batch, const std::string& tune_file,
                                      const std::string& kernel_config);

GemmVariant parse_gemm_variant(const std::string& name);

// Kinds of kernels that EngineOptions::leave_out leaves out of the fused step (timing diagnostics:
// what a kind costs inside the captured step, where no profiler's timeline is at hand).
struct LeftOut {
  bool film = false, router = false, dual = false, down = false, rmsnorm = false, collapse = false;
  bool any() const { return film || router || dual || down || rmsnorm || collapse; }
};
// "" or kinds joined by '+'; throws naming an unknown kind.
LeftOut parse_leave_out(const std::string& list);

// The summation-order class of a down GEMM choice (a kernel-config value of down=): "cublas", or
// "sk<N>" for a kernel that splits K N ways (CUTLASS's variants and our sk1 tiles: "sk1"). Choices
// of one class may differ between batch sizes (batch invariance); the tuner groups by it.
std::string down_numerics(const std::string& down);

}  // namespace swapffn::cuda
