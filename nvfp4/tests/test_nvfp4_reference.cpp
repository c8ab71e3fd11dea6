// CPU tests of the NVFP4 reference (issue 5): value decoding, layout conversion, generators and the
// four operations on hand-computed cases.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "swapffn/error.hpp"
#include "swapffn/nvfp4/reference.hpp"

namespace swapffn::nvfp4 {
namespace {

TEST(Nvfp4Reference, E2m1Table) {
  const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), expect[c]) << "code " << c;
    EXPECT_EQ(std::signbit(e2m1_to_float(static_cast<uint8_t>(c))), c >= 8) << "code " << c;
  }
}

TEST(Nvfp4Reference, E4m3fnDecode) {
  EXPECT_EQ(e4m3fn_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3fn_to_float(0x80)));
  EXPECT_EQ(e4m3fn_to_float(0x38), 1.0f);           // exponent 7 = bias
  EXPECT_EQ(e4m3fn_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3fn_to_float(0x44), 3.0f);
  EXPECT_EQ(e4m3fn_to_float(0x7E), 448.0f);         // largest finite
  EXPECT_EQ(e4m3fn_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3fn_to_float(0x01), 0x1p-9f);        // smallest subnormal: 1/8 * 2^-6
  EXPECT_EQ(e4m3fn_to_float(0x07), 7 * 0x1p-9f);    // largest subnormal
  EXPECT_EQ(e4m3fn_to_float(0x08), 0x1p-6f);        // smallest normal
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0xFF)));
  EXPECT_FALSE(std::isinf(e4m3fn_to_float(0x78)));  // no infinities: 0x78 is 256
  EXPECT_EQ(e4m3fn_to_float(0x78), 256.0f);
}

TEST(Nvfp4Reference, E4m3fnEncodeRoundTripsAndRounds) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float v = e4m3fn_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(float_to_e4m3fn(v), c == 0x80 ? 0x80 : c) << "code " << c;
  }
  EXPECT_EQ(float_to_e4m3fn(1.0625f), 0x38);   // halfway 1 and 1.125: ties to even (1.0)
  EXPECT_EQ(float_to_e4m3fn(1.1875f), 0x3A);   // halfway 1.125 and 1.25: ties to even (1.25)
  EXPECT_EQ(float_to_e4m3fn(1000.0f), 0x7E);   // saturates
  EXPECT_EQ(float_to_e4m3fn(0x1p-11f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(float_to_e4m3fn(std::nanf("")), 0x7F);
}

TEST(Nvfp4Reference, Fp16Conversion) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);          // rounds up to inf
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);          // smallest subnormal
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);          // tie to even: zero
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3C00);   // tie to even
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02);
  EXPECT_EQ(float_to_fp16(0x1.ffcp-15f), 0x0400);      // rounds from subnormal into normal
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x7C00; h += 7) EXPECT_EQ(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))), h);
}

TEST(Nvfp4Reference, BlockedLayoutFormulaAndRoundTrip) {
  // Hand check of the formula: row 37, column 6 of batch 1 with RM = 2, RK = 2.
  EXPECT_EQ(scale_offset(ScaleLayout::blocked_128x4, 200, 8, 37, 6, 1),
            1 * 2 * 2 * 512 + 0 * 2 * 512 + 1 * 512 + 5 * 16 + 1 * 4 + 2);
  EXPECT_EQ(scale_bytes(ScaleLayout::blocked_128x4, 200, 6, 3), 2 * 2 * 512 * 3);
  const int64_t rows = 200, ks = 12, l = 2;
  const HostOperand op = make_operand(InputKind::dual, rows, ks * 16, l, 7);
  const auto blocked = scales_to_blocked(op.scales, rows, ks, l);
  EXPECT_EQ(static_cast<int64_t>(blocked.size()), scale_bytes(ScaleLayout::blocked_128x4, rows, ks, l));
  EXPECT_EQ(scales_to_plain(blocked, rows, ks, l), op.scales);
  // Every plain byte lands at a distinct blocked offset.
  std::set<int64_t> seen;
  for (int64_t b = 0; b < l; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < ks; ++j) seen.insert(scale_offset(ScaleLayout::blocked_128x4, rows, ks, i, j, b));
  EXPECT_EQ(static_cast<int64_t>(seen.size()), rows * ks * l);
  EXPECT_THROW(scales_to_plain(std::vector<uint8_t>(5), rows, ks, l), Error);
}

TEST(Nvfp4Reference, GeneratorsFollowTheIssueDistributions) {
  const auto gemv = make_operand(InputKind::gemv, 64, 256, 2, 1);
  for (uint8_t b : gemv.data) EXPECT_LT(b, 4);
  for (uint8_t s : gemv.scales) {
    const float v = e4m3fn_to_float(s);
    EXPECT_TRUE(v == 0 || v == 1 || v == 2);
  }
  const auto gemm = make_operand(InputKind::gemm, 64, 512, 1, 2);
  std::set<uint8_t> bytes(gemm.data.begin(), gemm.data.end());
  EXPECT_EQ(bytes.size(), 256u);
  for (uint8_t s : gemm.scales) {
    const float v = e4m3fn_to_float(s);
    EXPECT_TRUE(v == 0 || v == 1 || v == 2 || v == 3);
  }
  const auto dual = make_operand(InputKind::dual, 64, 512, 1, 3);
  bool subnormal = false;
  for (uint8_t b : dual.data) EXPECT_EQ(b & 0b0100'0100, 0);
  for (uint8_t s : dual.scales) {
    const float v = e4m3fn_to_float(s);
    EXPECT_TRUE(v >= 0 && v <= 1);
    subnormal |= (s & 0x78) == 0 && s != 0;
  }
  EXPECT_TRUE(subnormal);
  const auto grouped = make_operand(InputKind::grouped, 64, 512, 1, 4);
  for (uint8_t s : grouped.scales) {
    const float v = e4m3fn_to_float(s);
    EXPECT_TRUE(v == 1 || v == 2);
  }
  // Seeded: same seed, same bytes; another seed, other bytes.
  EXPECT_EQ(make_operand(InputKind::gemm, 8, 64, 1, 9).data, make_operand(InputKind::gemm, 8, 64, 1, 9).data);
  EXPECT_NE(make_operand(InputKind::gemm, 8, 64, 1, 9).data, make_operand(InputKind::gemm, 8, 64, 1, 10).data);
}

// A 1-row operand of K = 32 with given bytes and two scales.
HostOperand hand(std::vector<uint8_t> data, uint8_t s0, uint8_t s1, int64_t rows = 1) {
  HostOperand op;
  op.rows = rows;
  op.k = 32;
  op.batches = 1;
  op.data = std::move(data);
  op.scales.resize(2 * rows);
  for (int64_t r = 0; r < rows; ++r) {
    op.scales[2 * r] = s0;
    op.scales[2 * r + 1] = s1;
  }
  return op;
}

TEST(Nvfp4Reference, GemvGemmOnHandCases) {
  // a = [0.5 (lo nibble), 6 (hi nibble), 0...] * 2 and, in block 1, [-1.5, 0, ...] * 0.5
  std::vector<uint8_t> ad(16, 0);
  ad[0] = 0x71;  // element 0: code 1 (0.5), element 1: code 7 (6)
  ad[8] = 0x0B;  // element 16: code 11 (-1.5)
  const HostOperand a = hand(ad, 0x40 /*2*/, 0x30 /*0.5*/);
  std::vector<uint8_t> bd(16, 0);
  bd[0] = 0x22;  // elements 0, 1: 1.0
  bd[8] = 0x04;  // element 16: 2.0
  const HostOperand b = hand(bd, 0x38 /*1*/, 0x44 /*3*/);
  // sum = 0.5*2*1 + 6*2*1 + (-1.5*0.5)*(2*3) = 1 + 12 - 4.5 = 8.5
  EXPECT_EQ(fp16_to_float(reference_gemv(a, b)[0]), 8.5f);
  EXPECT_EQ(fp16_to_float(reference_gemm(a, b)[0]), 8.5f);
  // Two b rows: the second is the first negated (sign bits).
  std::vector<uint8_t> b2d = bd;
  b2d.insert(b2d.end(), bd.begin(), bd.end());
  b2d[16] = 0xAA;
  b2d[24] = 0x0C;
  const HostOperand b2 = hand(b2d, 0x38, 0x44, 2);
  const auto c = reference_gemm(a, b2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(fp16_to_float(c[0]), 8.5f);
  EXPECT_EQ(fp16_to_float(c[1]), -8.5f);
  // A NaN scale poisons the whole dot product.
  const HostOperand an = hand(ad, 0x7F, 0x30);
  EXPECT_TRUE(std::isnan(fp16_to_float(reference_gemv(an, b)[0])));
}

TEST(Nvfp4Reference, DualGemmSwigluOnHandCase) {
  std::vector<uint8_t> ad(16, 0);
  ad[0] = 0x02;  // a[0] = 1
  const HostOperand a = hand(ad, 0x38, 0x38);
  std::vector<uint8_t> g(16, 0), u(16, 0);
  g[0] = 0x04;  // gate = 2 * 1
  u[0] = 0x05;  // up = 3 * 1
  const auto c = reference_dual_gemm_swiglu(a, hand(g, 0x38, 0x38), hand(u, 0x38, 0x38));
  const float expect = 2.0f / (1.0f + std::exp(-2.0f)) * 3.0f;  // 5.2846...
  EXPECT_EQ(c[0], float_to_fp16(expect));
  EXPECT_NEAR(fp16_to_float(c[0]), 5.2846f, 4e-3f);
}

TEST(Nvfp4Reference, GroupedIsPerGroupGemm) {
  std::vector<HostOperand> as, bs;
  for (int gi = 0; gi < 3; ++gi) {
    as.push_back(make_operand(InputKind::grouped, 5 + gi, 64, 1, 100 + gi));
    bs.push_back(make_operand(InputKind::grouped, 7, 64, 1, 200 + gi));
  }
  const auto out = reference_grouped_gemm(as, bs);
  ASSERT_EQ(out.size(), 3u);
  for (int gi = 0; gi < 3; ++gi) EXPECT_EQ(out[gi], reference_gemm(as[gi], bs[gi]));
  EXPECT_THROW(reference_grouped_gemm(as, {}), Error);
  EXPECT_THROW(reference_gemm(as[0], make_operand(InputKind::grouped, 7, 128, 1, 1)), Error);
}

}  // namespace
}  // namespace swapffn::nvfp4
