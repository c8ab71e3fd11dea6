// The fp8 recipes of SPEC section 5 on the host: OCP e4m3 (E4M3FN) with fp32 scales, in one of two
// scalings (Scaling): `blocks`, 128x128 blocks of a weight and 1x128 blocks of an activation row;
// `rows`, one scale per output channel (row) of a weight and one per activation row. One
// definition, which the quantiser, the fp8 file format, the CPU references and the GPU kernels'
// tests all follow.
//   scale = amax(group) / 448 (1 for an all-zero group), q = e4m3_rne(x / scale), saturating.
// Dividing (not multiplying by 448 / amax) keeps the GPU quantisers (fp8_block_quantize.cuh)
// bit-identical: both round x / s once in IEEE fp32. The fp8 dual GEMM's epilogue multiplies by
// 1 / s; its codes are checked against this recipe within a tolerance.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "swapffn/bf16.hpp"

namespace swapffn::fp8 {

constexpr float kE4m3Max = 448.0f;  // the largest finite e4m3 value
constexpr int kBlock = 128;         // the block edge of the `blocks` scaling

// fp32 -> e4m3, round to nearest even; beyond +-448 saturates to +-448, NaN becomes 0x7F.
uint8_t e4m3_from_float(float x);
float e4m3_to_float(uint8_t v);

// The scale of a group (a block, a row) whose largest magnitude is amax (finite, >= 0): amax / 448, or 1 where
// that is 0: an all-zero group, or amax below 448 * 2^-150 (fp32 subnormals), whose scale would underflow
// (x / 0 is not a code); such a group's codes are zeros either way.
inline float block_scale(float amax) {
  const float s = amax / kE4m3Max;
  return s > 0.0f ? s : 1.0f;
}

inline int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Which values share a scale (SPEC section 5, "fp8 paths"); a model's FFN has one scaling.
enum class Scaling {
  blocks,  // 128x128 blocks of a weight, 1x128 blocks of an activation row (the DeepSeek-V3 recipe)
  rows,    // one scale per output channel of a weight, one per activation row ("FP8 dynamic")
};
const char* scaling_name(Scaling s);  // "blocks", "rows"
// The scaling called `name`; throws naming it and the known names otherwise.
Scaling parse_scaling(std::string_view name);
// The scales of one activation row of k values: blocks(k), or 1.
inline int64_t row_scale_count(Scaling s, int64_t k) { return s == Scaling::blocks ? blocks(k) : 1; }
// The shape of a [rows, cols] weight's scales: [blocks(rows), blocks(cols)], or [rows, 1].
std::vector<int64_t> weight_scale_shape(Scaling s, int64_t rows, int64_t cols);

// A [rows, cols] weight in e4m3 with its fp32 scales (weight_scale_shape, row-major).
struct ScaledWeight {
  Scaling scaling = Scaling::blocks;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;  // [rows, cols] e4m3
  std::vector<float> scale;

  float scale_at(int64_t r, int64_t c) const {
    return scaling == Scaling::rows ? scale[size_t(r)] : scale[size_t((r / kBlock) * blocks(cols) + c / kBlock)];
  }
  float dequant(int64_t r, int64_t c) const { return e4m3_to_float(data[size_t(r * cols + c)]) * scale_at(r, c); }
  // Throws naming `what` unless the sizes agree and every scale is finite and > 0.
  void validate(const char* what) const;
};

// Quantises a row-major [rows, cols] bf16 weight (non-finite values are refused, naming `what`).
ScaledWeight quantize_weight(Scaling s, const std::vector<bf16>& w, int64_t rows, int64_t cols, const char* what);

// The FFN's three weights in e4m3 (SPEC section 2 names: w1.weight [F, D], w3.weight [F, D],
// w2.weight [D, F]), all in one scaling; the router, norms and collapse stay bf16.
struct FfnWeights {
  ScaledWeight w1, w3, w2;
  Scaling scaling() const { return w1.scaling; }
};
FfnWeights quantize_ffn(Scaling s, const std::vector<bf16>& w1, const std::vector<bf16>& w3,
                        const std::vector<bf16>& w2, int64_t d_model, int64_t d_ff);

// Quantises one activation row of k values: q [k], scales [row_scale_count(s, k)].
void quantize_row(Scaling s, const float* x, int64_t k, uint8_t* q, float* scales);

// The reference of an fp8 GEMM, out[m, n] = sum_g (sum_{k in g} a[m,k] w[n,k]) * sa[m,g] * sw[n,g] over
// the k groups g of w's scaling (its 128-blocks, or all of k), a [M, K] quantised by quantize_row
// with that scaling (sa [M, row_scale_count]): each group's products summed in fp64, then scaled;
// the GPU's fp32 sums differ within the stated tolerance.
void gemm_reference(const uint8_t* a, const float* sa, const ScaledWeight& w, int64_t m, float* out);

}  // namespace swapffn::fp8
