// Exact NVFP4 -> fp16 dequantization on the device, shared by all NVFP4 kernels.
//
// Why fp16 (not bf16) and why it is exact: an e2m1 value has <= 2 significant bits and an e4m3
// scale <= 4, so value * scale has <= 6 significant bits; its magnitude lies in
// [0.5 * 2^-9, 6 * 448] = [2^-10, 2688], inside fp16's normal range. fp16 (11 significant bits)
// therefore holds every product exactly, and gives the tensor cores the same speed as bf16.
//
// How, without a lookup table (Hopper has no e2m1 conversion instruction but has e4m3x2 -> f16x2):
// a nibble s.e1e0.m re-packed as the e4m3 byte s.00e1e0.m00 is exactly value * 2^-6 (for e >= 1
// the e4m3 exponent e with bias 7 gives 2^(e-7) (1 + m/2) = 2^-6 * 2^(e-1) (1 + m/2); for e = 0 the
// e4m3 subnormal m/2 * 2^-6 = 2^-6 * m/2). The hardware converts it to fp16, and one HMUL2 by
// (scale * 64) — exact in fp16, at most 448 * 64 = 28672 — restores value * scale.
// A NaN scale (0x7F/0xFF) becomes an fp16 NaN and stays NaN through the product (NaN * 0 = NaN),
// so it propagates into the fp32 accumulators like the reference.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace swapffn::cuda::nvfp4 {

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// Two e4m3fn scale bytes (low byte first) -> {scale0 * 64, scale1 * 64} in fp16, exact.
__device__ __forceinline__ __half2 scales_x64(uint32_t two_bytes) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFF), __NV_E4M3);
  return __hmul2(__half2(r), __half2half2(__ushort_as_half(0x5400)));  // 0x5400 = 64.0
}

// Eight e2m1 values (one 32-bit word, element 0 in the low nibble) times their scale, exact, as
// four fp16 pairs in the order {e0, e2}, {e4, e6}, {e1, e3}, {e5, e7}. That order is free: every
// kernel converts both operands of a dot product with this function and uses the same output
// positions for the same k, and a dot product does not depend on the order of its terms; it saves
// the two byte permutes that would restore element order. scale64 is {scale*64, scale*64} from
// scales_x64.
__device__ __forceinline__ void dequant8(uint32_t w, __half2 scale64, uint32_t out[4]) {
  // Low nibbles (even elements) and high nibbles (odd elements) as e4m3 bytes s.00e1e0.m00.
  const uint32_t lo = ((w << 4) & 0x80808080u) | ((w << 2) & 0x1C1C1C1Cu);  // e0 e2 e4 e6
  const uint32_t hi = (w & 0x80808080u) | ((w >> 2) & 0x1C1C1C1Cu);         // e1 e3 e5 e7
  const uint32_t pairs[4] = {lo & 0xFFFF, lo >> 16, hi & 0xFFFF, hi >> 16};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pairs[i]), __NV_E4M3);
    out[i] = h2_bits(__hmul2(__half2(r), scale64));
  }
}

// Thirty-two e2m1 values (16 bytes) with their two scales (elements 0..15 use scale byte 0,
// 16..31 scale byte 1): out[0..15] are 16 fp16 pairs, out[4 c .. 4 c + 3] the elements
// 8 c .. 8 c + 7 in dequant8's order.
__device__ __forceinline__ void dequant32(uint4 raw, uint32_t two_scales, uint32_t out[16]) {
  const __half2 s = scales_x64(two_scales);
  const __half2 s0 = __low2half2(s), s1 = __high2half2(s);
  dequant8(raw.x, s0, out + 0);
  dequant8(raw.y, s0, out + 4);
  dequant8(raw.z, s1, out + 8);
  dequant8(raw.w, s1, out + 12);
}

}  // namespace swapffn::cuda::nvfp4
