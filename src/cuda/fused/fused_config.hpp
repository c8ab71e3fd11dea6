// Kernel configuration of the fused backend, apart from the problem (Config, batch size), chosen in
// one place: select_fused_config(), a line of reason per choice in the .cpp.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "swapffn/config.hpp"
#include "swapffn/fused_options.hpp"

namespace swapffn::cuda {

struct FusedKernelConfig {
  DualGemmTile up = DualGemmTile::bn256;      // SwiGLU dual GEMM [M, D] x [2F, D]^T; no numerics change
  EventHead router = EventHead::folded;       // fixes a summation order: the same at every batch size
  // Row groups: the rows split into this many groups of whole 64-row blocks, each running its events
  // on its own stream inside the step's graph, so one group's head and RMSNorms run under another
  // group's GEMMs. Rows are independent: no numerics change. Needs the folded head.
  int row_groups = 1;
  // fused-fp8's up projection (fused_options.hpp): a numerics class, the same at every batch size.
  Fp8UpGemm fp8_up = Fp8UpGemm::sm90;
};

// The first row and the row count of each group when `rows` rows split into `groups` groups: whole
// 64-row blocks (the GEMMs' M tiles), at most `groups`, none empty.
std::vector<std::pair<int64_t, int64_t>> row_group_ranges(int64_t rows, int groups);

// Throws naming the first dimension the fused kernels cannot run (before any allocation) and the
// backend (`fused`, or `fused-fp8`, which shares the event heads and row groups).
void check_fused_supports(const Config& cfg, const std::string& backend = "fused");

// The configuration for `batch` sequences: the defaults, then the tuned entry for this batch, then
// the pinned choices. Throws when the result cannot run (the folded head on d_model > 1024, row
// groups with the cuBLAS head) or when the event head would differ from batch 1's.
FusedKernelConfig select_fused_config(const Config& cfg, int64_t batch, const FusedOptions& opt);

}  // namespace swapffn::cuda
