// The fp8 backend's activation quantisers against the recipe on the host (fp8::quantize_row):
// - bf16 rows -> e4m3 and 1x128 scales: bit-exact (codes and scales), on rows holding every case
//   the recipe names: an all-zero block, negative zeros, values that saturate at 448 after the
//   division, subnormal codes, blocks of very different magnitudes, an infinite value (scale inf:
//   its code NaN, the block's others zero, as IEEE division gives);
// - SwiGLU then quantisation: the device's expf is not the host's std::exp (both within an ulp or
//   two), so a code may differ where u lies on a rounding boundary: scales within 4 ulp, at most
//   0.1% of the codes different and each only to its neighbour; a block of u so small that its
//   scale would underflow gets scale 1 and zero codes.
// - the RMSNorm writing e4m3: the recipe on the bf16 values it writes otherwise, bit-exact.
// Both scalings (blocks: 1x128 blocks; rows: one scale per row). The scales' layout is cuBLASLt's
// [scales per row, rows] (rows innermost). Outputs are poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/kernels/fp8_quantize_rows.hpp"
#include "cuda/kernels/fp8_swiglu_quantize.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

// Poisoned device outputs: codes 0x7F (NaN, which no finite input quantises to) and NaN scales.
struct QuantOut {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<float> s;
  QuantOut(int64_t rows, int64_t k) {
    q.upload(std::vector<uint8_t>(size_t(rows * k), 0x7F));
    s.upload(std::vector<float>(size_t(rows * (k / 128)), std::nanf("")));
  }
};

// Row r's block scales (the [k / 128, rows] layout) bit for bit against the recipe's.
::testing::AssertionResult same_scales(const std::vector<float>& want, const std::vector<float>& s, int64_t rows,
                                       int64_t r) {
  for (size_t b = 0; b < want.size(); ++b) {
    const float got = s[b * size_t(rows) + size_t(r)];
    if (std::memcmp(&want[b], &got, sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "scale of row " << r << " block " << b << ": " << got << " vs " << want[b];
  }
  return ::testing::AssertionSuccess();
}

// Rows of bf16 values exercising the recipe's cases, block by block.
std::vector<bf16> special_rows(int64_t rows, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<bf16> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const int64_t kind = (r * 5 + c / 128) % 7;
      float v = nd(rng);
      if (kind == 0) v = (c % 2) ? 0.0f : -0.0f;              // an all-zero block (with negative zeros)
      if (kind == 1) v *= 1e-30f;                              // tiny block: its own small scale
      if (kind == 2) v *= 3e4f;                                // large block
      if (kind == 3 && c % 128 == 5) v = 1e3f;                 // one outlier: the rest become subnormal codes
      if (kind == 4 && c % 128 == 0) v = 0.0f;                 // a zero inside an ordinary block
      if (kind == 5 && c % 128 == 9) v = -std::fabs(v) * 40;   // a negative maximum
      if (kind == 6 && r % 2 && c % 128 == 3) v = INFINITY;    // an infinite value: NaN there, zeros beside
      x[size_t(r * k + c)] = float_to_bf16(v);
    }
  return x;
}

class Fp8QuantizeScaling : public ::testing::TestWithParam<fp8::Scaling> {};
INSTANTIATE_TEST_SUITE_P(Scalings, Fp8QuantizeScaling, ::testing::Values(fp8::Scaling::blocks, fp8::Scaling::rows),
                         [](const auto& info) { return std::string(fp8::scaling_name(info.param)); });

TEST_P(Fp8QuantizeScaling, Bf16RowsAreBitExactWithTheRecipe) {
  const fp8::Scaling scaling = GetParam();
  // 3 x 9216: rows longer than a CTA holds in registers (read twice).
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{37, 1024}, {512, 128}, {3, 4096}, {3, 9216}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", k " + std::to_string(k));
    const int64_t per_row = fp8::row_scale_count(scaling, k);
    const std::vector<bf16> x = special_rows(rows, k, 17 + uint64_t(rows));
    DeviceBuffer<bf16> xd;
    xd.upload(x);
    QuantOut out(rows, k);
    launch_quantize_rows_e4m3(scaling, reinterpret_cast<const __nv_bfloat16*>(xd.get()), rows, k, out.q.get(),
                              out.s.get(), nullptr, /*pdl=*/true);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> q = out.q.download(size_t(rows * k));
    const std::vector<float> s = out.s.download(size_t(rows * per_row));
    std::vector<float> row(static_cast<size_t>(k)), want_s(static_cast<size_t>(per_row));
    std::vector<uint8_t> want_q(static_cast<size_t>(k));
    int64_t subnormal_codes = 0, saturated = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < k; ++c) row[size_t(c)] = bf16_to_float(x[size_t(r * k + c)]);
      fp8::quantize_row(scaling, row.data(), k, want_q.data(), want_s.data());
      ASSERT_TRUE(same_scales(want_s, s, rows, r));
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(int(want_q[size_t(c)]), int(q[size_t(r * k + c)])) << "code of row " << r << " column " << c;
        subnormal_codes += (want_q[size_t(c)] & 0x78) == 0 && (want_q[size_t(c)] & 0x07) != 0;
        saturated += (want_q[size_t(c)] & 0x7F) == 0x7E;
      }
    }
    EXPECT_GT(subnormal_codes, 0) << "the rows exercise no subnormal code";
    EXPECT_GT(saturated, 0) << "the rows exercise no block maximum";
  }
}

TEST_P(Fp8QuantizeScaling, SwigluThenQuantiseFollowsTheRecipe) {
  const fp8::Scaling scaling = GetParam();
  constexpr int64_t rows = 200, F = 384;
  const int64_t per_row = fp8::row_scale_count(scaling, F);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  std::vector<bf16> gu(size_t(rows * 2 * F));
  for (size_t i = 0; i < gu.size(); ++i) gu[i] = float_to_bf16(nd(rng) * ((i / 128) % 3 == 0 ? 1e-3f : 1.f));
  for (int64_t f = 0; f < 128; ++f) gu[size_t(7 * 2 * F + F + f)] = bf16{};  // row 7's first up block: u = 0
  // Row 11's second block: u ~ 5e-44, whose scale u / 448 would underflow to 0 (scale 1, zero codes).
  for (int64_t f = 128; f < 256; ++f) {
    gu[size_t(11 * 2 * F + f)] = float_to_bf16(1e-30f * (f % 2 ? 1.f : -1.f));
    gu[size_t(11 * 2 * F + F + f)] = float_to_bf16(1e-13f);
  }
  // Row 13: u = 0 throughout (its up values zero): scale 1 in both scalings.
  for (int64_t f = 0; f < F; ++f) gu[size_t(13 * 2 * F + F + f)] = bf16{};
  DeviceBuffer<bf16> gd;
  gd.upload(gu);
  QuantOut out(rows, F);
  launch_swiglu_quantize_e4m3(scaling, reinterpret_cast<const __nv_bfloat16*>(gd.get()), rows, F, out.q.get(),
                              out.s.get(), nullptr, /*pdl=*/true);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> q = out.q.download(size_t(rows * F));
  const std::vector<float> s = out.s.download(size_t(rows * per_row));
  std::vector<float> u(static_cast<size_t>(F)), want_s(static_cast<size_t>(per_row));
  std::vector<uint8_t> want_q(static_cast<size_t>(F));
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t f = 0; f < F; ++f) {
      const float g = bf16_to_float(gu[size_t(r * 2 * F + f)]), up = bf16_to_float(gu[size_t(r * 2 * F + F + f)]);
      u[size_t(f)] = g / (1.f + std::exp(-g)) * up;
    }
    fp8::quantize_row(scaling, u.data(), F, want_q.data(), want_s.data());
    for (int64_t b = 0; b < per_row; ++b) {
      const float got = s[size_t(b * rows + r)], want = want_s[size_t(b)];
      ASSERT_TRUE(std::isfinite(got)) << "scale of row " << r << " block " << b << " not written";
      EXPECT_LE(std::fabs(got - want), 4 * std::ldexp(std::fabs(want), -23)) << "row " << r << " block " << b;
    }
    for (int64_t f = 0; f < F; ++f) {
      const uint8_t a = q[size_t(r * F + f)], w = want_q[size_t(f)];
      ASSERT_NE(a & 0x7F, 0x7F) << "code of row " << r << " column " << f << " not written";
      if (a == w) continue;
      ++differ;
      EXPECT_EQ(a & 0x80, w & 0x80) << "row " << r << " column " << f;
      EXPECT_LE(std::abs(int(a & 0x7F) - int(w & 0x7F)), 1) << "row " << r << " column " << f;
    }
  }
  if (scaling == fp8::Scaling::blocks) {
    EXPECT_EQ(s[size_t(0 * rows + 7)], 1.0f) << "an all-zero block's scale is 1";
    EXPECT_EQ(s[size_t(1 * rows + 11)], 1.0f) << "a block whose scale would underflow has scale 1";
    for (int64_t f = 128; f < 256; ++f) EXPECT_EQ(q[size_t(11 * F + f)] & 0x7F, 0) << "row 11 column " << f;
  }
  EXPECT_EQ(s[size_t(13)], 1.0f) << "an all-zero row's scale is 1";
  EXPECT_LE(differ, rows * F / 1000) << differ << " codes differ";
}

// The RMSNorm writing the fp8 FFN's operand (the head and the RMSNorm of fused-fp8): the recipe on
// the bf16 values it writes otherwise, bit for bit; rows of very different magnitudes, a row of
// zeros, and both kernels (row in registers up to D = 1024, streamed above).
TEST(Fp8Quantize, RmsnormE4m3IsTheRecipeOnItsBf16Output) {
  for (const auto& [rows, D] : {std::pair<int64_t, int64_t>{37, 1024}, {5, 2048}, {64, 384}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", D " + std::to_string(D));
    std::mt19937_64 rng(uint64_t(rows + D));
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> h(static_cast<size_t>(rows * D)), gain(static_cast<size_t>(D));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < D; ++d)
        h[size_t(r * D + d)] = r == 3 ? 0.f : nd(rng) * std::ldexp(1.f, int(r % 9) * 4 - 16) * (d % 128 == 7 ? 30.f : 1.f);
    for (float& g : gain) g = 0.5f + std::fabs(nd(rng));
    DeviceBuffer<float> hd, gd;
    hd.upload(h);
    gd.upload(gain);
    DeviceBuffer<__nv_bfloat16> bf(static_cast<size_t>(rows * D));
    QuantOut out(rows, D);
    launch_rmsnorm(hd.get(), gd.get(), {.bf16 = bf.get()}, rows, D, 1e-6f, nullptr);
    launch_rmsnorm(hd.get(), gd.get(), {.e4m3 = out.q.get(), .scales = out.s.get()}, rows, D, 1e-6f, nullptr,
                   /*pdl=*/true);
    // The rows scaling (the row in registers only: D <= 1024).
    QuantOut per_row(rows, D);
    if (D <= 1024)
      launch_rmsnorm(hd.get(), gd.get(), {.e4m3 = per_row.q.get(), .scales = per_row.s.get(), .per_row = true}, rows,
                     D, 1e-6f, nullptr, /*pdl=*/true);
    else
      EXPECT_THROW(launch_rmsnorm(hd.get(), gd.get(), {.e4m3 = per_row.q.get(), .scales = per_row.s.get(), .per_row = true},
                                  rows, D, 1e-6f, nullptr),
                   Error);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<__nv_bfloat16> x = bf.download(size_t(rows * D));
    const std::vector<uint8_t> q = out.q.download(size_t(rows * D));
    const std::vector<float> s = out.s.download(size_t(rows * (D / 128)));
    const std::vector<uint8_t> rq = per_row.q.download(size_t(rows * D));
    const std::vector<float> rs = per_row.s.download(size_t(rows));
    std::vector<float> row(static_cast<size_t>(D)), want_s(static_cast<size_t>(D / 128));
    std::vector<uint8_t> want_q(static_cast<size_t>(D));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t d = 0; d < D; ++d) row[size_t(d)] = __bfloat162float(x[size_t(r * D + d)]);
      fp8::quantize_row(fp8::Scaling::blocks, row.data(), D, want_q.data(), want_s.data());
      ASSERT_TRUE(same_scales(want_s, s, rows, r));
      ASSERT_EQ(0, std::memcmp(want_q.data(), &q[size_t(r * D)], size_t(D))) << "codes of row " << r;
      if (D > 1024) continue;
      float row_scale = 0.f;
      fp8::quantize_row(fp8::Scaling::rows, row.data(), D, want_q.data(), &row_scale);
      ASSERT_TRUE(same_scales({row_scale}, rs, rows, r)) << "rows scaling";
      ASSERT_EQ(0, std::memcmp(want_q.data(), &rq[size_t(r * D)], size_t(D))) << "rows scaling: codes of row " << r;
    }
    EXPECT_EQ(s[3], 1.0f) << "the zero row's scale is 1";
  }
  QuantOut out(4, 256);
  EXPECT_THROW(launch_rmsnorm(nullptr, nullptr, {.e4m3 = out.q.get()}, 4, 256, 1e-6f, nullptr), Error)
      << "codes without scales";
}

TEST(Fp8Quantize, RefusesWidthsThatAreNotWholeBlocks) {
  DeviceBuffer<bf16> x(size_t(4 * 200));
  QuantOut out(4, 256);
  EXPECT_THROW(launch_quantize_rows_e4m3(fp8::Scaling::blocks, reinterpret_cast<const __nv_bfloat16*>(x.get()), 4,
                                         200, out.q.get(), out.s.get(), nullptr),
               Error);
  EXPECT_THROW(launch_swiglu_quantize_e4m3(fp8::Scaling::blocks, reinterpret_cast<const __nv_bfloat16*>(x.get()), 2,
                                           100, out.q.get(), out.s.get(), nullptr),
               Error);
}

}  // namespace
}  // namespace swapffn::cuda
