// Where a kernel that ends in the FFN's RMSNorm writes the FFN's operand for its rows: bf16 rows,
// or, for the fp8 FFN, those same bf16 values quantised in 1x128 blocks (fp8_block_quantize.cuh;
// the bits of fp8_quantize_rows on the bf16 rows, without writing and reading them back).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#ifdef __CUDACC__
#include "cuda/kernels/fp8_block_quantize.cuh"
#endif

namespace swapffn::cuda {

// The pointers are at the launch's first row: row r of the launch is bf16[r * D], or codes
// e4m3[r * D] and scales[kb * rows + r] (the scales [D / 128, rows], rows innermost: the layout of
// GemmOperands::scaled_e4m3(fp8::Scaling::blocks)'s X). Exactly one of bf16 and e4m3 is set, or neither (no norm).
struct FfnOperand {
  __nv_bfloat16* bf16 = nullptr;
  uint8_t* e4m3 = nullptr;
  float* scales = nullptr;

  bool any() const { return bf16 != nullptr || e4m3 != nullptr; }
  // Set as one of the two forms, whole.
  bool well_formed() const {
    return bf16 != nullptr ? e4m3 == nullptr && scales == nullptr : (e4m3 == nullptr) == (scales == nullptr);
  }
};

#ifdef __CUDACC__
// Called by all 32 lanes of the warp that holds row r of the launch's `rows`: lane `lane` stores
// the values (a, b, c, d) at [128 i + 4 lane, +4) of the row (1x128 block i is the warp's), rounded
// to bf16, then for e4m3 quantised with the block's scale.
__device__ __forceinline__ void store_ffn_operand(const FfnOperand& o, int64_t r, int64_t rows, int D, int i, int lane,
                                                  float a, float b, float c, float d) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
  const int64_t at = r * D + 128 * i + 4 * lane;
  if (o.e4m3 == nullptr) {
    *reinterpret_cast<uint2*>(o.bf16 + at) =
        make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
    return;
  }
  const float v[4] = {__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi)};
  float scale = 0.f;
  *reinterpret_cast<uint32_t*>(o.e4m3 + at) = quantize_block_e4m3(v, scale);
  if (lane == 0) o.scales[i * rows + r] = scale;
}
#endif

}  // namespace swapffn::cuda
