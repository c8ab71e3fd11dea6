// The fp8 recipe of SPEC section 5 on the host: OCP e4m3 (E4M3FN) with fp32 block scales, 128x128
// blocks of a weight and 1x128 blocks of an activation row. One definition, which the quantiser,
// the fp8 file format, the CPU references and the GPU kernels' tests all follow.
//   scale = amax(block) / 448 (1 for an all-zero block), q = e4m3_rne(x / scale), saturating.
// Dividing (not multiplying by 448 / amax) keeps the GPU quantisers (fp8_block_quantize.cuh)
// bit-identical: both round x / s once in IEEE fp32. The fp8 dual GEMM's epilogue multiplies by
// 1 / s; its codes are checked against this recipe within a tolerance.
#pragma once
#include <cstdint>
#include <vector>

#include "swapffn/bf16.hpp"

namespace swapffn::fp8 {

constexpr float kE4m3Max = 448.0f;  // the largest finite e4m3 value
constexpr int kBlock = 128;         // the block edge of both scale layouts

// fp32 -> e4m3, round to nearest even; beyond +-448 saturates to +-448, NaN becomes 0x7F.
uint8_t e4m3_from_float(float x);
float e4m3_to_float(uint8_t v);

// The scale of a block whose largest magnitude is amax (finite, >= 0): amax / 448, or 1 where that is
// 0: an all-zero block, or amax below 448 * 2^-150 (fp32 subnormals), whose scale would underflow
// (x / 0 is not a code); such a block's codes are zeros either way.
inline float block_scale(float amax) {
  const float s = amax / kE4m3Max;
  return s > 0.0f ? s : 1.0f;
}

inline int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// A [rows, cols] weight in e4m3 with one fp32 scale per 128x128 block, scale [blocks(rows), blocks(cols)].
struct BlockScaledWeight {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;  // [rows, cols] e4m3
  std::vector<float> scale;   // [blocks(rows), blocks(cols)]

  float dequant(int64_t r, int64_t c) const {
    return e4m3_to_float(data[size_t(r * cols + c)]) * scale[size_t((r / kBlock) * blocks(cols) + c / kBlock)];
  }
  // Throws naming `what` unless the sizes agree and every scale is finite and > 0.
  void validate(const char* what) const;
};

// Quantises a row-major [rows, cols] bf16 weight (non-finite values are refused, naming `what`).
BlockScaledWeight quantize_weight(const std::vector<bf16>& w, int64_t rows, int64_t cols, const char* what);

// The FFN's three weights in e4m3 (SPEC section 2 names: w1.weight [F, D], w3.weight [F, D],
// w2.weight [D, F]); the router, norms and collapse stay bf16.
struct FfnWeights {
  BlockScaledWeight w1, w3, w2;
};
FfnWeights quantize_ffn(const std::vector<bf16>& w1, const std::vector<bf16>& w3, const std::vector<bf16>& w2,
                        int64_t d_model, int64_t d_ff);

// Quantises one activation row of k values in 1x128 blocks: q [k], scales [blocks(k)].
void quantize_row(const float* x, int64_t k, uint8_t* q, float* scales);

// The reference of an fp8 GEMM, out[m, n] = sum_kb (sum_{k in kb} a[m,k] w[n,k]) * sa[m,kb] * sw[n/128,kb]
// with a [M, K] quantised by rows (sa [M, blocks(K)]) and w a block-scaled [N, K] weight: each block's
// products summed in fp64, then scaled; the GPU's fp32 sums differ within the stated tolerance.
void gemm_reference(const uint8_t* a, const float* sa, const BlockScaledWeight& w, int64_t m, float* out);

}  // namespace swapffn::fp8
