// The operands of the bench's GEMMs-alone anchors (cublas_ffn_gemms.hpp): host-only, so that the row
// model (bench_rows.hpp) names them in builds without CUDA too.
#pragma once
#include <string>

namespace swapffn::cuda {

enum class AnchorOperands {
  bf16,
  e4m3_blocks,  // the fp8 recipe: W in 128x128 blocks, x and u in 1x128 blocks (GemmOperands' layouts)
  e4m3_rows,    // one fp32 scale per row of x and u and per output channel of W (OUTER_VEC_32F)
  e4m3_tensor,  // one fp32 scale per tensor (SCALAR_32F)
};
// "bf16", "block-scaled e4m3", ...: what a message or a report names.
std::string anchor_operands_name(AnchorOperands o);

}  // namespace swapffn::cuda
