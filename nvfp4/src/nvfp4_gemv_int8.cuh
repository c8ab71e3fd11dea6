// Pieces shared by the two NVFP4 GEMV kernels (register loads: sm90_nvfp4_gemv.cu; TMA ring:
// sm90_nvfp4_gemv_tma.cu): the int8 dot product of 16-element blocks, scale access in both
// layouts, and the fixed-order split-K epilogue.
//
// int8 decode: twice an e2m1 value is an integer in [-12, 12]; PRMT byte-table look-ups turn the
// nibbles into int8 and DP4A sums a block's 16 products exactly in int32 (|sum| <= 16 x 144); the
// block's sum is then scaled once by sfa * sfb / 4 (one FFMA, exact: 12 x 8 significant bits).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "nvfp4_launch.hpp"

namespace swapffn::cuda::nvfp4::gemv {

// Twice the e2m1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} as a byte table indexed by the 3-bit code.
constexpr uint32_t kMag2Lo = 0x03020100u, kMag2Hi = 0x0C080604u;

// Four e2m1 nibbles (sel bits 0-15, element order) -> int8 bytes 2|v| of the non-negative ones and
// 0 for the negative: a selector nibble with its top (sign) bit set makes PRMT replicate the sign
// bit of the table byte instead, and every table byte is non-negative.
__device__ __forceinline__ uint32_t pos4(uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(kMag2Lo), "r"(kMag2Hi), "r"(sel));
  return r;
}

// 32 elements of b as int8 2b, four per word in element order: p[2w], p[2w + 1] are elements
// 8w..8w+3 and 8w+4..8w+7. Positive and negative parts come from two look-ups (the second on the
// sign-flipped nibbles); (x | 0x80) - y per byte never borrows across bytes (x, y <= 12), and
// ^ 0x80 turns the biased byte back into two's complement.
__device__ __forceinline__ void b_int8(uint4 raw, uint32_t p[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t sel = (i & 1) ? w[i >> 1] >> 16 : w[i >> 1];
    p[i] = ((pos4(sel) | 0x80808080u) - pos4(sel ^ 0x8888u)) ^ 0x80808080u;
  }
}

// The exact integer sum of (2a)(2b) over one 16-element block: a's two words w0, w1 (elements
// 0-7, 8-15 of the block) against b's int8 words p[0..3] in b_int8's order.
__device__ __forceinline__ int block_dot16(uint32_t w0, uint32_t w1, const uint32_t* p) {
  int pos = 0, neg = 0;  // products with a's non-negative and with its negative elements
  const uint32_t w[2] = {w0, w1};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const uint32_t wn = w[j] ^ 0x88888888u;
    pos = __dp4a(static_cast<int>(pos4(w[j])), static_cast<int>(p[2 * j]), pos);
    pos = __dp4a(static_cast<int>(pos4(w[j] >> 16)), static_cast<int>(p[2 * j + 1]), pos);
    neg = __dp4a(static_cast<int>(pos4(wn)), static_cast<int>(p[2 * j]), neg);
    neg = __dp4a(static_cast<int>(pos4(wn >> 16)), static_cast<int>(p[2 * j + 1]), neg);
  }
  return pos - neg;
}

// Two e4m3fn scale bytes (low byte first) -> fp32, exact (NaN stays NaN).
__device__ __forceinline__ float2 scales_f32(uint32_t two_bytes) {
  const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xFFFF), __NV_E4M3);
  return __half22float2(__half2(r));
}

// Scale pair (scale columns j, j+1, j even) of `row`, plain or blocked; both bytes are adjacent.
__device__ __forceinline__ int64_t scale_pair_offset(const OperandArgs& op, int64_t row, int64_t k, int64_t j) {
  if (op.rk_blocks == 0) return row * (k / 16) + j;
  return (row / 128) * op.rk_blocks * 512 + (j / 4) * 512 + (row % 32) * 16 + ((row % 128) / 32) * 4 + (j % 4);
}

// Epilogue of a 32-row CTA, called by every thread of it: thread r < 32 holds row r's sum over the
// CTA's K range in v. With split-K the CTA stores its partial; the last of the row block's CTAs to
// arrive adds all partials in split order (so the result never depends on arrival order), resets
// the counter and writes the fp16 results.
__device__ __forceinline__ void finish_rows(const GemvArgs& args, int row_block, int split, int batch, float v) {
  if (args.split_k > 1) {
    const int64_t tile = static_cast<int64_t>(batch) * gridDim.x + row_block;
    float* part = args.partials + tile * args.split_k * kGemvRowsPerCta;
    if (threadIdx.x < kGemvRowsPerCta) __stcg(part + split * kGemvRowsPerCta + threadIdx.x, v);
    __threadfence();
    __syncthreads();  // every thread's partial is fenced before thread 0 counts the CTA in
    // The barrier's OR hands thread 0's verdict to the CTA without a shared-memory word.
    if (!__syncthreads_or(threadIdx.x == 0 && atomicAdd(args.counters + tile, 1) == args.split_k - 1)) return;
    __threadfence();
    if (threadIdx.x < kGemvRowsPerCta) {
      v = __ldcg(part + threadIdx.x);
      for (int s = 1; s < args.split_k; ++s) v += __ldcg(part + s * kGemvRowsPerCta + threadIdx.x);
    }
    if (threadIdx.x == 0) args.counters[tile] = 0;
  }
  const int64_t row = static_cast<int64_t>(row_block) * kGemvRowsPerCta + threadIdx.x;
  if (threadIdx.x < kGemvRowsPerCta && row < args.m)
    static_cast<__half*>(args.c)[batch * args.m + row] = __float2half_rn(v);
}

}  // namespace swapffn::cuda::nvfp4::gemv
