// The fp8 recipe (include/swapffn/fp8.hpp): e4m3 conversions, block scales and the GEMM reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::fp8 {
namespace {

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (int v = 0; v < 256; ++v) {
    const uint8_t code = static_cast<uint8_t>(v);
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(code)));
      continue;
    }
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(code)), code) << "code " << v;
  }
}

TEST(Fp8, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0xB8), -1.0f);
}

TEST(Fp8, RoundsToNearestEvenAndSaturates) {
  // Between 1 (0x38) and 1.125 (0x39): the midpoint goes to the even code, others to the nearest.
  EXPECT_EQ(e4m3_from_float(1.0625f), 0x38);
  EXPECT_EQ(e4m3_from_float(1.0626f), 0x39);
  EXPECT_EQ(e4m3_from_float(1.1875f), 0x3A);  // midpoint of 1.125 and 1.25: even is 0x3A
  EXPECT_EQ(e4m3_from_float(1e6f), 0x7E);
  EXPECT_EQ(e4m3_from_float(-1e6f), 0xFE);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(460.0f), 0x7E);
  EXPECT_EQ(e4m3_from_float(std::nanf("")), 0x7F);
  // Subnormals: half of the smallest rounds to zero (even), 1.5 of it to 2 (even).
  EXPECT_EQ(e4m3_from_float(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -20)), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  // Rounding up into the next binade: 15.5/8 * 2^0 rounds to 2.0.
  EXPECT_EQ(e4m3_from_float(1.9375f), 0x40);
}

TEST(Fp8, WeightBlocksScaleToTheirLargestMagnitude) {
  const int64_t rows = 200, cols = 130;  // partial blocks on both edges
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<bf16> w(size_t(rows * cols));
  for (auto& v : w) v = float_to_bf16(dist(rng));
  for (int64_t c = 0; c < 128; ++c) w[size_t(5 * cols + c)] = bf16{};  // zeros inside a block
  const BlockScaledWeight q = quantize_weight(w, rows, cols, "w");
  q.validate("w");
  ASSERT_EQ(q.scale.size(), 4u);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 2; ++bc) {
      float amax = 0.0f, qmax = 0.0f;
      for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) {
          amax = std::max(amax, std::fabs(bf16_to_float(w[size_t(r * cols + c)])));
          qmax = std::max(qmax, std::fabs(e4m3_to_float(q.data[size_t(r * cols + c)])));
        }
      EXPECT_EQ(q.scale[size_t(br * 2 + bc)], amax / kE4m3Max);
      EXPECT_EQ(qmax, kE4m3Max);  // the largest value of each block maps to 448 exactly
    }
  double err = 0.0, ref = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = bf16_to_float(w[size_t(r * cols + c)]);
      err += (q.dequant(r, c) - v) * (q.dequant(r, c) - v);
      ref += v * v;
    }
  EXPECT_LT(std::sqrt(err / ref), 0.04);  // e4m3 keeps 3 mantissa bits: about 2-3% RMS
  EXPECT_GT(std::sqrt(err / ref), 0.0);
}

TEST(Fp8, AllZeroBlockHasScaleOneAndNonFiniteWeightsAreRefused) {
  std::vector<bf16> w(size_t(128 * 128));
  const BlockScaledWeight q = quantize_weight(w, 128, 128, "w");
  EXPECT_EQ(q.scale[0], 1.0f);
  for (uint8_t v : q.data) EXPECT_EQ(v, 0);
  // A row block so small that amax / 448 underflows to 0: scale 1 (not 0, whose quotients are no
  // codes), codes zero; an amax a little above that threshold (448 * 2^-150) keeps its own scale.
  const float tiny[128] = {3e-44f, -5e-44f};
  uint8_t codes[128];
  float scale = 0.f;
  quantize_row(tiny, 128, codes, &scale);
  EXPECT_EQ(scale, 1.0f);
  for (uint8_t v : codes) EXPECT_EQ(v & 0x7F, 0);
  EXPECT_GT(block_scale(1e-42f), 0.0f);
  EXPECT_LT(block_scale(1e-42f), 1e-44f);
  w[17] = float_to_bf16(std::numeric_limits<float>::infinity());
  try {
    quantize_weight(w, 128, 128, "w2.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2.weight"), std::string::npos) << e.what();
  }
}

TEST(Fp8, ValidateNamesBadScalesAndSizes) {
  std::vector<bf16> w(size_t(128 * 256), float_to_bf16(0.5f));
  BlockScaledWeight q = quantize_weight(w, 128, 256, "w1.weight");
  auto expect_refused = [](const BlockScaledWeight& bad, const std::string& needle) {
    try {
      bad.validate("w1.weight");
      FAIL() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  BlockScaledWeight bad = q;
  bad.scale[1] = std::numeric_limits<float>::quiet_NaN();
  expect_refused(bad, "block scale 1");
  bad = q;
  bad.scale[0] = 0.0f;
  expect_refused(bad, "block scale 0");
  bad = q;
  bad.scale.pop_back();
  expect_refused(bad, "128x128 blocks");
  bad = q;
  bad.data[3] = 0xFF;
  expect_refused(bad, "NaN");
}

TEST(Fp8, RowQuantiserAndGemmReference) {
  const int64_t m = 3, n = 130, k = 300;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(m * k));
  for (auto& v : x) v = dist(rng);
  std::vector<bf16> w(size_t(n * k));
  for (auto& v : w) v = float_to_bf16(0.05f * dist(rng));
  const BlockScaledWeight qw = quantize_weight(w, n, k, "w");
  std::vector<uint8_t> qx(size_t(m * k));
  std::vector<float> sx(size_t(m * blocks(k)));
  for (int64_t i = 0; i < m; ++i) quantize_row(&x[size_t(i * k)], k, &qx[size_t(i * k)], &sx[size_t(i * blocks(k))]);
  std::vector<float> out(size_t(m * n), std::nanf(""));
  gemm_reference(qx.data(), sx.data(), qw, m, out.data());
  // Against the unquantised product: the recipe's error, a few percent relative.
  double err = 0.0, ref = 0.0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0.0;
      for (int64_t c = 0; c < k; ++c) exact += double(x[size_t(i * k + c)]) * bf16_to_float(w[size_t(j * k + c)]);
      ASSERT_TRUE(std::isfinite(out[size_t(i * n + j)]));
      err += (out[size_t(i * n + j)] - exact) * (out[size_t(i * n + j)] - exact);
      ref += exact * exact;
    }
  EXPECT_LT(std::sqrt(err / ref), 0.06);
  EXPECT_GT(std::sqrt(err / ref), 1e-4);
}

}  // namespace
}  // namespace swapffn::fp8
