// The fp8 recipes (include/swapffn/fp8.hpp): exact e4m3 conversions and the quantisers of both scalings.
#include "swapffn/fp8.hpp"

#include <algorithm>
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

const char* scaling_name(Scaling s) { return s == Scaling::rows ? "rows" : "blocks"; }

Scaling parse_scaling(std::string_view name) {
  for (Scaling s : {Scaling::blocks, Scaling::rows})
    if (name == scaling_name(s)) return s;
  SWAPFFN_FAIL("unknown fp8 scaling '" + std::string(name) + "' (known: blocks, rows)");
}

std::vector<int64_t> weight_scale_shape(Scaling s, int64_t rows, int64_t cols) {
  if (s == Scaling::rows) return {rows, 1};
  return {blocks(rows), blocks(cols)};
}

void ScaledWeight::validate(const char* what) const {
  SWAPFFN_REQUIRE(rows > 0 && cols > 0, std::string(what) + ": empty fp8 weight");
  SWAPFFN_REQUIRE(data.size() == size_t(rows * cols), std::string(what) + ": fp8 data has " +
                                                          std::to_string(data.size()) + " values, expected " +
                                                          std::to_string(rows * cols));
  const std::vector<int64_t> shape = weight_scale_shape(scaling, rows, cols);
  SWAPFFN_REQUIRE(scale.size() == size_t(shape[0] * shape[1]),
                  std::string(what) + ": " + std::to_string(scale.size()) + " scales, expected " +
                      std::to_string(shape[0] * shape[1]) +
                      (scaling == Scaling::rows ? " (one per output channel)" : " (128x128 blocks)"));
  for (size_t i = 0; i < scale.size(); ++i)
    SWAPFFN_REQUIRE(std::isfinite(scale[i]) && scale[i] > 0.0f,
                    std::string(what) + ": scale " + std::to_string(i) + " is not a finite positive number");
  for (size_t i = 0; i < data.size(); ++i)
    SWAPFFN_REQUIRE((data[i] & 0x7F) != 0x7F, std::string(what) + ": fp8 value " + std::to_string(i) + " is NaN");
}

ScaledWeight quantize_weight(Scaling s, const std::vector<bf16>& w, int64_t rows, int64_t cols, const char* what) {
  SWAPFFN_REQUIRE(rows > 0 && cols > 0 && w.size() == size_t(rows * cols),
                  std::string(what) + ": weight size does not match its shape");
  ScaledWeight q;
  q.scaling = s;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(w.size());
  // The groups sharing a scale: g_rows x g_cols tiles, in the scale layout's row-major order.
  const int64_t g_rows = s == Scaling::rows ? 1 : kBlock, g_cols = s == Scaling::rows ? cols : kBlock;
  const int64_t n_r = (rows + g_rows - 1) / g_rows, n_c = (cols + g_cols - 1) / g_cols;
  q.scale.resize(size_t(n_r * n_c));
  for (int64_t br = 0; br < n_r; ++br)
    for (int64_t bc = 0; bc < n_c; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * g_rows), c1 = std::min(cols, (bc + 1) * g_cols);
      float amax = 0.0f;
      for (int64_t r = br * g_rows; r < r1; ++r)
        for (int64_t c = bc * g_cols; c < c1; ++c) {
          const float v = bf16_to_float(w[size_t(r * cols + c)]);
          SWAPFFN_REQUIRE(std::isfinite(v), std::string(what) + ": non-finite value at [" + std::to_string(r) + ", " +
                                                std::to_string(c) + "]");
          amax = std::max(amax, std::fabs(v));
        }
      const float sc = block_scale(amax);
      q.scale[size_t(br * n_c + bc)] = sc;
      for (int64_t r = br * g_rows; r < r1; ++r)
        for (int64_t c = bc * g_cols; c < c1; ++c)
          q.data[size_t(r * cols + c)] = e4m3_from_float(bf16_to_float(w[size_t(r * cols + c)]) / sc);
    }
  return q;
}

FfnWeights quantize_ffn(Scaling s, const std::vector<bf16>& w1, const std::vector<bf16>& w3,
                        const std::vector<bf16>& w2, int64_t d_model, int64_t d_ff) {
  return {quantize_weight(s, w1, d_ff, d_model, "w1.weight"), quantize_weight(s, w3, d_ff, d_model, "w3.weight"),
          quantize_weight(s, w2, d_model, d_ff, "w2.weight")};
}

void quantize_row(Scaling s, const float* x, int64_t k, uint8_t* q, float* scales) {
  const int64_t group = s == Scaling::rows ? k : kBlock;
  for (int64_t b = 0; b < row_scale_count(s, k); ++b) {
    const int64_t k0 = b * group, k1 = std::min(k, k0 + group);
    float amax = 0.0f;
    for (int64_t i = k0; i < k1; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float sc = block_scale(amax);
    scales[b] = sc;
    for (int64_t i = k0; i < k1; ++i) q[i] = e4m3_from_float(x[i] / sc);
  }
}

void gemm_reference(const uint8_t* a, const float* sa, const ScaledWeight& w, int64_t m, float* out) {
  const int64_t n = w.rows, k = w.cols, kb = row_scale_count(w.scaling, k);
  const int64_t group = w.scaling == Scaling::rows ? k : kBlock;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t b = 0; b < kb; ++b) {
        double sum = 0.0;
        for (int64_t c = b * group; c < std::min(k, (b + 1) * group); ++c)
          sum += double(e4m3_to_float(a[i * k + c])) * double(e4m3_to_float(w.data[size_t(j * k + c)]));
        acc += sum * double(sa[i * kb + b]) * double(w.scale_at(j, b * group));
      }
      out[i * n + j] = static_cast<float>(acc);
    }
}

}  // namespace swapffn::fp8
