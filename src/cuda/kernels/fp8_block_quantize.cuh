// The fp8 recipe's 1x128 activation block (swapffn/fp8.hpp) on the device, one warp per block, four
// consecutive values per lane: scale = amax / 448 (1 for an all-zero block), codes
// e4m3_rne_satfinite(v / scale). Bit-identical to fp8::quantize_row: amax is exact (a maximum), the
// scale and every quotient are one IEEE fp32 division each (__fdiv_rn, whatever the compile flags),
// the conversion one cvt.rn.satfinite.
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

// The warp's block: v holds this lane's values [4 * lane, 4 * lane + 4) of it. Returns their four
// codes packed little-endian (value 4 * lane in the low byte); every lane gets the block's scale.
__device__ __forceinline__ uint32_t quantize_block_e4m3(const float (&v)[4], float& scale) {
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  scale = amax > 0.f ? __fdiv_rn(amax, kE4m3Max) : 1.f;
  const __nv_fp8x2_storage_t lo =
      __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(v[0], scale), __fdiv_rn(v[1], scale)), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi =
      __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(v[2], scale), __fdiv_rn(v[3], scale)), __NV_SATFINITE, __NV_E4M3);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

}  // namespace swapffn::cuda
