// The fp8 recipes' activation groups (swapffn/fp8.hpp) on the device: a 1x128 block per warp, four
// consecutive values per lane, or a row of such blocks (Scaling::rows: one scale per row);
// scale = amax / 448 (1 where that is 0: fp8::block_scale), codes e4m3_rne_satfinite(v / scale).
// Bit-identical to fp8::quantize_row: amax is exact (a maximum), the scale one IEEE fp32 division
// (__fdiv_rn, whatever the compile flags), every quotient that can round to a nonzero code rounded
// once as IEEE division rounds it (div_by_scale), the conversion one cvt.rn.satfinite.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace swapffn::cuda {

inline constexpr int kFp8Block = 128;  // fp8::kBlock: values per activation scale
inline constexpr float kE4m3Max = 448.0f;

// Four consecutive bf16 values (8-byte aligned) widened to fp32.
__device__ __forceinline__ void load_bf16x4(const __nv_bfloat16* p, float (&v)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  v[0] = a.x;
  v[1] = a.y;
  v[2] = b.x;
  v[3] = b.y;
}

// Below this scale the quotients divide (__fdiv_rn): div_by_scale's residuals need it (below).
inline constexpr float kMinRefinedScale = 0x1p-90f;

// x / scale rounded to nearest even, the bits of __fdiv_rn, for x of the block whose scale it is
// (|x| <= 448 scale) and scale >= kMinRefinedScale, with inv = __frcp_rn(scale): the quotient x * inv
// refined twice, q += (x - q scale) * inv (fused multiply-adds). With a correctly rounded reciprocal
// and a quotient within an ulp, one refinement rounds correctly (Markstein), provided the residual
// is exact: it is a multiple of ulp(scale) ulp(q) >= 2^-149 (scale >= 2^-90, |q| >= 2^-10, the
// smallest quotient that does not round to a zero code). x * inv alone may be 1.5 ulp off: hence
// two. The sign is copied back, since a zero quotient's residual steps lose it. This is the fast
// path of div.rn without its range check and branch per value: with div.rn the head's and the
// RMSNorm's quantisation made them 1.5x and 1.7x slower than this (ncu, B = 1).
__device__ __forceinline__ float div_by_scale(float x, float scale, float inv) {
  float q = x * inv;
  q = fmaf(fmaf(-q, scale, x), inv, q);
  q = fmaf(fmaf(-q, scale, x), inv, q);
  return copysignf(q, x);
}

// The scale of a group (a 1x128 block, a row) whose largest magnitude is amax: fp8::block_scale.
__device__ __forceinline__ float group_scale_e4m3(float amax) {
  const float scale = __fdiv_rn(amax, kE4m3Max);
  return scale > 0.f ? scale : 1.f;  // all zeros, or so small that the scale underflows
}

// The codes of four values of a group whose scale is `scale` (group_scale_e4m3), packed
// little-endian (v[0] in the low byte).
__device__ __forceinline__ uint32_t encode_e4m3x4(const float (&v)[4], float scale) {
  float c[4];
  if (scale >= kMinRefinedScale && scale < INFINITY) {  // the same for the whole group; inf divides (x / inf)
    const float inv = __frcp_rn(scale);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = div_by_scale(v[i], scale, inv);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = __fdiv_rn(v[i], scale);
  }
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(c[0], c[1]), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c[2], c[3]), __NV_SATFINITE, __NV_E4M3);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// The largest magnitude of four values, then its maximum over the warp (every lane gets it).
__device__ __forceinline__ float amax4(const float (&v)[4]) {
  return fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
}
__device__ __forceinline__ float warp_amax(float amax) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

// The warp's block: v holds this lane's values [4 * lane, 4 * lane + 4) of it. Returns their four
// codes packed little-endian (value 4 * lane in the low byte); every lane gets the block's scale.
__device__ __forceinline__ uint32_t quantize_block_e4m3(const float (&v)[4], float& scale) {
  scale = group_scale_e4m3(warp_amax(amax4(v)));
  return encode_e4m3x4(v, scale);
}

// A row in the rows scaling, by one CTA of kRowThreads threads: thread t takes the 4-value groups at
// columns 4 (t + kRowThreads j). Rows of at most kRowValues values stay in registers (every load in
// flight at once: one pass); longer ones are read twice (the amax, then the codes). load(c, v) gives
// the values at [c, c + 4) of the row. Writes the row's codes to q_row and lets thread 0 write the
// scale. Every thread of the CTA must call it (it synchronises the CTA).
inline constexpr int kRowThreads = 128, kRowGroups = 16;
inline constexpr int64_t kRowValues = int64_t{4} * kRowThreads * kRowGroups;
template <class Load>
__device__ __forceinline__ void quantize_row_e4m3_cta(int64_t k, Load&& load, uint8_t* q_row, float* scale_out) {
  __shared__ float warp_max[kRowThreads / 32];
  const int t = threadIdx.x;
  const bool in_registers = k <= kRowValues;
  float v[kRowGroups][4];
  float amax = 0.f;
  if (in_registers) {
#pragma unroll
    for (int j = 0; j < kRowGroups; ++j)
      if (4 * (t + int64_t{kRowThreads} * j) < k) {
        load(4 * (t + int64_t{kRowThreads} * j), v[j]);
        amax = fmaxf(amax, amax4(v[j]));
      }
  } else {
    for (int64_t c = 4 * t; c < k; c += 4 * kRowThreads) {
      float w[4];
      load(c, w);
      amax = fmaxf(amax, amax4(w));
    }
  }
  amax = warp_amax(amax);
  if (t % 32 == 0) warp_max[t / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kRowThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float scale = group_scale_e4m3(amax);
  if (in_registers) {
#pragma unroll
    for (int j = 0; j < kRowGroups; ++j)
      if (4 * (t + int64_t{kRowThreads} * j) < k)
        *reinterpret_cast<uint32_t*>(q_row + 4 * (t + int64_t{kRowThreads} * j)) = encode_e4m3x4(v[j], scale);
  } else {
    for (int64_t c = 4 * t; c < k; c += 4 * kRowThreads) {
      float w[4];
      load(c, w);
      *reinterpret_cast<uint32_t*>(q_row + c) = encode_e4m3x4(w, scale);
    }
  }
  if (t == 0) *scale_out = scale;
}

}  // namespace swapffn::cuda
