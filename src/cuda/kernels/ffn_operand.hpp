// Where a kernel that ends in the FFN's RMSNorm writes the FFN's operand for its rows: bf16 rows,
// or, for the fp8 FFN, those same bf16 values quantised in 1x128 blocks or with one scale per row
// (fp8_block_quantize.cuh; the bits of fp8_quantize_rows on the bf16 rows, without writing and
// reading them back).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

#ifdef __CUDACC__
#include "cuda/kernels/fp8_block_quantize.cuh"
#endif

namespace swapffn::cuda {

// The pointers are at the launch's first row: row r of the launch is bf16[r * D], or codes
// e4m3[r * D] and scales[kb * rows + r] (the scales [D / 128, rows], rows innermost: GemmOperands'
// blocks layout of X), or with per_row, scales[r]. Exactly one of bf16 and e4m3 is set, or neither
// (no norm).
struct FfnOperand {
  __nv_bfloat16* bf16 = nullptr;
  uint8_t* e4m3 = nullptr;
  float* scales = nullptr;
  bool per_row = false;  // e4m3 in the rows scaling

  bool any() const { return bf16 != nullptr || e4m3 != nullptr; }
  // Set as one of the two forms, whole.
  bool well_formed() const {
    return bf16 != nullptr ? e4m3 == nullptr && scales == nullptr && !per_row
                           : (e4m3 == nullptr) == (scales == nullptr) && (e4m3 != nullptr || !per_row);
  }
};

#ifdef __CUDACC__
// Called by all 32 lanes of the warp that holds row r of the launch's `rows`: lane `lane` stores
// the values (a, b, c, d) at [128 i + 4 lane, +4) of the row (1x128 block i is the warp's), rounded
// to bf16, then for e4m3 (not per_row) quantised with the block's scale.
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

// The whole row at once, with its D = 128 nvec values in registers: value(i) is lane `lane`'s
// float4 of block i (a few multiplies; evaluated once per store, and once more for the amax of a
// per-row scale). Any form, per_row included.
template <int kMaxVec, class Value>
__device__ __forceinline__ void store_ffn_operand_row(const FfnOperand& o, int64_t r, int64_t rows, int D, int lane,
                                                      Value&& value) {
  const int nvec = D / 128;
  if (o.e4m3 == nullptr || !o.per_row) {
#pragma unroll
    for (int i = 0; i < kMaxVec; ++i)
      if (i < nvec) {
        const float4 v = value(i);
        store_ffn_operand(o, r, rows, D, i, lane, v.x, v.y, v.z, v.w);
      }
    return;
  }
  // The recipe quantises the bf16 values the bf16 form would hold.
  const auto rounded = [](float4 v, float (&out)[4]) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    out[0] = __low2float(lo);
    out[1] = __high2float(lo);
    out[2] = __low2float(hi);
    out[3] = __high2float(hi);
  };
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < nvec) {
      float v[4];
      rounded(value(i), v);
      amax = fmaxf(amax, amax4(v));
    }
  const float scale = group_scale_e4m3(warp_amax(amax));
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i)
    if (i < nvec) {
      float v[4];
      rounded(value(i), v);
      *reinterpret_cast<uint32_t*>(o.e4m3 + r * D + 128 * i + 4 * lane) = encode_e4m3x4(v, scale);
    }
  if (lane == 0) o.scales[r] = scale;
}
#endif

}  // namespace swapffn::cuda
