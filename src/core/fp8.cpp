// The fp8 recipe (include/swapffn/fp8.hpp): exact e4m3 conversions and the block quantisers.
#include "swapffn/fp8.hpp"

#include <cmath>
#include <string>

#include "swapffn/error.hpp"

namespace swapffn::fp8 {

uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;  // saturate (0x7E = 1.75 * 2^8 = 448)
  // Subnormals and the smallest normal: multiples of 2^-9 (nearbyint rounds half to even).
  if (a < std::ldexp(1.0f, -6)) return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int exp = e - 1;
  int mant = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exp))) - 8;  // 3 mantissa bits
  if (mant == 8) {
    ++exp;
    mant = 0;
  }
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | mant);
}

float e4m3_to_float(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exp = (v >> 3) & 0xF, mant = v & 0x7;
  if (exp == 0xF && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

void BlockScaledWeight::validate(const char* what) const {
  SWAPFFN_REQUIRE(rows > 0 && cols > 0, std::string(what) + ": empty fp8 weight");
  SWAPFFN_REQUIRE(data.size() == size_t(rows * cols), std::string(what) + ": fp8 data has " +
                                                          std::to_string(data.size()) + " values, expected " +
                                                          std::to_string(rows * cols));
  SWAPFFN_REQUIRE(scale.size() == size_t(blocks(rows) * blocks(cols)),
                  std::string(what) + ": " + std::to_string(scale.size()) + " block scales, expected " +
                      std::to_string(blocks(rows) * blocks(cols)) + " (128x128 blocks)");
  for (size_t i = 0; i < scale.size(); ++i)
    SWAPFFN_REQUIRE(std::isfinite(scale[i]) && scale[i] > 0.0f,
                    std::string(what) + ": block scale " + std::to_string(i) + " is not a finite positive number");
  for (size_t i = 0; i < data.size(); ++i)
    SWAPFFN_REQUIRE((data[i] & 0x7F) != 0x7F, std::string(what) + ": fp8 value " + std::to_string(i) + " is NaN");
}

BlockScaledWeight quantize_weight(const std::vector<bf16>& w, int64_t rows, int64_t cols, const char* what) {
  SWAPFFN_REQUIRE(rows > 0 && cols > 0 && w.size() == size_t(rows * cols),
                  std::string(what) + ": weight size does not match its shape");
  BlockScaledWeight q;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(w.size());
  q.scale.resize(size_t(blocks(rows) * blocks(cols)));
  for (int64_t br = 0; br < blocks(rows); ++br)
    for (int64_t bc = 0; bc < blocks(cols); ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * kBlock), c1 = std::min(cols, (bc + 1) * kBlock);
      float amax = 0.0f;
      for (int64_t r = br * kBlock; r < r1; ++r)
        for (int64_t c = bc * kBlock; c < c1; ++c) {
          const float v = bf16_to_float(w[size_t(r * cols + c)]);
          SWAPFFN_REQUIRE(std::isfinite(v), std::string(what) + ": non-finite value at [" + std::to_string(r) + ", " +
                                                std::to_string(c) + "]");
          amax = std::max(amax, std::fabs(v));
        }
      const float s = block_scale(amax);
      q.scale[size_t(br * blocks(cols) + bc)] = s;
      for (int64_t r = br * kBlock; r < r1; ++r)
        for (int64_t c = bc * kBlock; c < c1; ++c)
          q.data[size_t(r * cols + c)] = e4m3_from_float(bf16_to_float(w[size_t(r * cols + c)]) / s);
    }
  return q;
}

FfnWeights quantize_ffn(const std::vector<bf16>& w1, const std::vector<bf16>& w3, const std::vector<bf16>& w2,
                        int64_t d_model, int64_t d_ff) {
  return {quantize_weight(w1, d_ff, d_model, "w1.weight"), quantize_weight(w3, d_ff, d_model, "w3.weight"),
          quantize_weight(w2, d_model, d_ff, "w2.weight")};
}

void quantize_row(const float* x, int64_t k, uint8_t* q, float* scales) {
  for (int64_t b = 0; b < blocks(k); ++b) {
    const int64_t k0 = b * kBlock, k1 = std::min(k, k0 + kBlock);
    float amax = 0.0f;
    for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = block_scale(amax);
    scales[b] = s;
    for (int64_t i = k0; i < k1; ++i) q[i] = e4m3_from_float(x[i] / s);
  }
}

void gemm_reference(const uint8_t* a, const float* sa, const BlockScaledWeight& w, int64_t m, float* out) {
  const int64_t n = w.rows, k = w.cols, kb = blocks(k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t b = 0; b < kb; ++b) {
        double block = 0.0;
        for (int64_t c = b * kBlock; c < std::min(k, (b + 1) * kBlock); ++c)
          block += double(e4m3_to_float(a[i * k + c])) * double(e4m3_to_float(w.data[size_t(j * k + c)]));
        acc += block * double(sa[i * kb + b]) * double(w.scale[size_t((j / kBlock) * kb + b)]);
      }
      out[i * n + j] = static_cast<float>(acc);
    }
}

}  // namespace swapffn::fp8
