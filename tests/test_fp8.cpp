// The fp8 recipe (include/swapffn/fp8.hpp): e4m3 conversions, block scales and the GEMM reference.
#include <gtest/gtest.h>

#include <algorithm>
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
  const ScaledWeight q = quantize_weight(Scaling::blocks, w, rows, cols, "w");
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
  const ScaledWeight q = quantize_weight(Scaling::blocks, w, 128, 128, "w");
  EXPECT_EQ(q.scale[0], 1.0f);
  for (uint8_t v : q.data) EXPECT_EQ(v, 0);
  // A row block so small that amax / 448 underflows to 0: scale 1 (not 0, whose quotients are no
  // codes), codes zero; an amax a little above that threshold (448 * 2^-150) keeps its own scale.
  const float tiny[128] = {3e-44f, -5e-44f};
  uint8_t codes[128];
  float scale = 0.f;
  quantize_row(Scaling::blocks, tiny, 128, codes, &scale);
  EXPECT_EQ(scale, 1.0f);
  for (uint8_t v : codes) EXPECT_EQ(v & 0x7F, 0);
  EXPECT_GT(block_scale(1e-42f), 0.0f);
  EXPECT_LT(block_scale(1e-42f), 1e-44f);
  w[17] = float_to_bf16(std::numeric_limits<float>::infinity());
  try {
    quantize_weight(Scaling::blocks, w, 128, 128, "w2.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2.weight"), std::string::npos) << e.what();
  }
}

TEST(Fp8, ValidateNamesBadScalesAndSizes) {
  std::vector<bf16> w(size_t(128 * 256), float_to_bf16(0.5f));
  ScaledWeight q = quantize_weight(Scaling::blocks, w, 128, 256, "w1.weight");
  auto expect_refused = [](const ScaledWeight& bad, const std::string& needle) {
    try {
      bad.validate("w1.weight");
      FAIL() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ScaledWeight bad = q;
  bad.scale[1] = std::numeric_limits<float>::quiet_NaN();
  expect_refused(bad, ": scale 1 is not");
  bad = q;
  bad.scale[0] = 0.0f;
  expect_refused(bad, ": scale 0 is not");
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
  const ScaledWeight qw = quantize_weight(Scaling::blocks, w, n, k, "w");
  std::vector<uint8_t> qx(size_t(m * k));
  std::vector<float> sx(size_t(m * blocks(k)));
  for (int64_t i = 0; i < m; ++i) quantize_row(Scaling::blocks, &x[size_t(i * k)], k, &qx[size_t(i * k)], &sx[size_t(i * blocks(k))]);
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

// The rows scaling (SPEC section 5, v3): one scale per activation row, over all of its k values.
TEST(Fp8Rows, RowQuantiserScalesTheWholeRow) {
  const int64_t k = 300;  // not a multiple of 128: the row is one group whatever its length
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(k));
  for (auto& v : x) v = dist(rng);
  std::vector<uint8_t> q(static_cast<size_t>(k));
  float scale = 0.f;
  quantize_row(Scaling::rows, x.data(), k, q.data(), &scale);
  float amax = 0.f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(scale, amax / kE4m3Max);
  int at_max = 0;
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(q[size_t(i)], e4m3_from_float(x[size_t(i)] / scale)) << i;  // the recipe, value by value
    at_max += std::fabs(e4m3_to_float(q[size_t(i)])) == kE4m3Max;
  }
  EXPECT_GE(at_max, 1);  // the row's largest value maps to 448
  // Round trip: every value within half an e4m3 step of its own magnitude (or of the subnormal step).
  for (int64_t i = 0; i < k; ++i) {
    const float back = e4m3_to_float(q[size_t(i)]) * scale, v = x[size_t(i)];
    EXPECT_LE(std::fabs(back - v), std::max(std::fabs(v) / 16.f, scale * std::ldexp(1.f, -10))) << i;
  }
  // Against the same row in 1x128 blocks: three scales, each at most the row's.
  std::vector<float> bs(3);
  quantize_row(Scaling::blocks, x.data(), k, q.data(), bs.data());
  for (float b : bs) EXPECT_LE(b, scale);
  EXPECT_EQ(*std::max_element(bs.begin(), bs.end()), scale);
}

TEST(Fp8Rows, ZeroDenormalSaturatedAndOutlierRows) {
  const int64_t k = 256;
  std::vector<uint8_t> q(size_t(k), 0xAA);
  float scale = 0.f;
  // All zeros: scale 1, codes zero.
  const std::vector<float> zeros(size_t(k), 0.f);
  quantize_row(Scaling::rows, zeros.data(), k, q.data(), &scale);
  EXPECT_EQ(scale, 1.f);
  for (uint8_t v : q) EXPECT_EQ(v, 0);
  // fp32 subnormals whose amax / 448 underflows: scale 1, zero codes (their sign kept).
  std::vector<float> tiny(size_t(k), 0.f);
  tiny[3] = 3e-44f;
  tiny[200] = -5e-44f;
  quantize_row(Scaling::rows, tiny.data(), k, q.data(), &scale);
  EXPECT_EQ(scale, 1.f);
  for (uint8_t v : q) EXPECT_EQ(v & 0x7F, 0);
  // A subnormal row a little above the threshold keeps its own (subnormal) scale and maps its
  // largest value to 448.
  std::vector<float> sub(size_t(k), 1e-42f);
  sub[7] = 2e-42f;
  quantize_row(Scaling::rows, sub.data(), k, q.data(), &scale);
  EXPECT_GT(scale, 0.f);
  EXPECT_LT(scale, 1e-44f);
  EXPECT_EQ(e4m3_to_float(q[7]), kE4m3Max);
  // Values at fp32's largest magnitudes: the scale stays finite and the codes saturate at most to 448.
  std::vector<float> big(size_t(k), 3e38f);
  big[1] = -3.4e38f;
  quantize_row(Scaling::rows, big.data(), k, q.data(), &scale);
  EXPECT_TRUE(std::isfinite(scale));
  EXPECT_EQ(q[1], 0xFE);  // -448
  for (uint8_t v : q) EXPECT_NE(v & 0x7F, 0x7F);
  // One huge outlier: it takes 448, and values 2^12 below it fall to e4m3's subnormals or zero.
  std::vector<float> row(size_t(k), 1.f);
  row[100] = 4096.f * 448.f;
  quantize_row(Scaling::rows, row.data(), k, q.data(), &scale);
  EXPECT_EQ(scale, 4096.f);
  EXPECT_EQ(e4m3_to_float(q[100]), kE4m3Max);
  EXPECT_EQ(q[0], 0);  // 1 / 4096 = 2^-12, below e4m3's smallest subnormal (2^-9) by more than half
  // ... while blocks keeps the other blocks exact (1.0 is a code): the outlier costs rows accuracy.
  float bs[2];
  quantize_row(Scaling::blocks, row.data(), k, q.data(), bs);
  EXPECT_EQ(bs[1], 1.f / kE4m3Max);
  EXPECT_EQ(e4m3_to_float(q[200]) * bs[1], 1.f);
}

TEST(Fp8Rows, WeightChannelsScaleToTheirLargestMagnitude) {
  const int64_t rows = 5, cols = 300;
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<bf16> w(size_t(rows * cols));
  for (auto& v : w) v = float_to_bf16(dist(rng));
  for (int64_t c = 0; c < cols; ++c) w[size_t(2 * cols + c)] = bf16{};  // an all-zero channel
  const ScaledWeight q = quantize_weight(Scaling::rows, w, rows, cols, "w");
  q.validate("w");
  EXPECT_EQ(q.scaling, Scaling::rows);
  ASSERT_EQ(q.scale.size(), size_t(rows));
  EXPECT_EQ(weight_scale_shape(Scaling::rows, rows, cols), (std::vector<int64_t>{rows, 1}));
  EXPECT_EQ(weight_scale_shape(Scaling::blocks, rows, cols), (std::vector<int64_t>{1, 3}));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(bf16_to_float(w[size_t(r * cols + c)])));
    EXPECT_EQ(q.scale[size_t(r)], block_scale(amax)) << r;
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(q.scale_at(r, c), q.scale[size_t(r)]);
      EXPECT_EQ(q.data[size_t(r * cols + c)], e4m3_from_float(bf16_to_float(w[size_t(r * cols + c)]) / q.scale[size_t(r)]));
    }
  }
  EXPECT_EQ(q.scale[2], 1.f);
  ScaledWeight bad = q;
  bad.scale.push_back(1.f);
  try {
    bad.validate("w3.weight");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one per output channel"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("w3.weight"), std::string::npos) << e.what();
  }
  bad = q;
  bad.scale[4] = -1.f;
  EXPECT_THROW(bad.validate("w"), Error);
}

TEST(Fp8Rows, GemmReferenceScalesOnceAfterTheWholeSum) {
  const int64_t m = 3, n = 7, k = 300;
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(m * k));
  for (auto& v : x) v = dist(rng);
  std::vector<bf16> w(size_t(n * k));
  for (auto& v : w) v = float_to_bf16(0.05f * dist(rng));
  const ScaledWeight qw = quantize_weight(Scaling::rows, w, n, k, "w");
  std::vector<uint8_t> qx(size_t(m * k));
  std::vector<float> sx(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) quantize_row(Scaling::rows, &x[size_t(i * k)], k, &qx[size_t(i * k)], &sx[size_t(i)]);
  std::vector<float> out(size_t(m * n), std::nanf(""));
  gemm_reference(qx.data(), sx.data(), qw, m, out.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;  // the recipe: products summed exactly over all of k, then both scales
      for (int64_t c = 0; c < k; ++c)
        sum += double(e4m3_to_float(qx[size_t(i * k + c)])) * double(e4m3_to_float(qw.data[size_t(j * k + c)]));
      EXPECT_EQ(out[size_t(i * n + j)], float(sum * double(sx[size_t(i)]) * double(qw.scale[size_t(j)])));
    }
}

TEST(Fp8Rows, ScalingNames) {
  EXPECT_EQ(parse_scaling("rows"), Scaling::rows);
  EXPECT_EQ(parse_scaling("blocks"), Scaling::blocks);
  EXPECT_STREQ(scaling_name(Scaling::rows), "rows");
  for (const char* bad : {"", "row", "Rows", "tensor", "blocks "}) {
    try {
      parse_scaling(bad);
      FAIL() << "expected an error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("known: blocks, rows"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace swapffn::fp8
