// The operands of the bench's GEMMs-alone anchors (cublas_ffn_gemms.hpp): host-only, so that the row
// model (bench_rows.hpp) names them in builds without CUDA too.
#pragma once
#include <optional>
#include <string>

#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

// bf16, or e4m3 with the scales of an fp8 scaling (GemmOperands' layouts: blocks, BLK128x128_32F and
// VEC128_32F; rows, OUTER_VEC_32F), or with one fp32 scale per tensor (SCALAR_32F).
struct AnchorOperands {
  bool e4m3 = false;
  std::optional<fp8::Scaling> scaling;  // e4m3: unset for one scale per tensor

  static constexpr AnchorOperands bf16() { return {}; }
  static constexpr AnchorOperands scaled(fp8::Scaling s) { return {true, s}; }
  static constexpr AnchorOperands per_tensor() { return {true, std::nullopt}; }
  bool operator==(const AnchorOperands&) const = default;
};
// "bf16", "blocks-scaled e4m3", "rows-scaled e4m3", "tensor-scaled e4m3": what a message or a
// report names.
std::string anchor_operands_name(AnchorOperands o);

}  // namespace swapffn::cuda
