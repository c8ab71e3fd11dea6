// sm90_fp8_dual_gemm_swiglu (fused-fp8's up projection with fp8up=sm90) against the recipe on the
// host: gate and up as fp8::gemm_reference of the same codes and scales (block sums in fp64),
// u = silu(gate) * up, then fp8::quantize_row(blocks, u). The kernel sums each block in the fp8 tensor cores
// (about 14 bits inside a block, ~1e-4 relative: gpu_test_fp8_gemm.cpp) and in fp32 across blocks,
// so its u differs from the host's in the last bits: each block's scale within 1e-3 relative, at
// most 1% of the codes different and each of those within one e4m3 step of the recipe's code, or
// within 2e-3 of the block's largest (448: small codes, whose steps are finer than the sums' error).
// A wrong column, row or scale gives errors of hundreds. Every output is poisoned
// first; two runs give the same bits, and the same rows give the same bits at any row count (the
// batch). Shapes: the default model's (k = 1024, f = 4096) at 512 rows (one tile per consumer), 120
// (a partial 64-row tile) and 1100 (several tiles per consumer, a partial last tile); the tiny
// model's (k = 128, f = 384) at 40 rows (the cluster's second CTA has no rows) and 1040 (the last
// cluster's second CTA has no rows); 150 rows of k = 256 (three m tiles: the second unit has one CTA
// past the last row); 1000 rows of k = 384 (3 k blocks: fewer than the ring's stages), with rows
// whose u is so small (block amax below 1.3e-36) that a reciprocal of its scale would overflow, and
// rows whose u's block scale would underflow to 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/kernels/sm90_fp8_dual_gemm_swiglu.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

fp8::ScaledWeight random_weight(int64_t rows, int64_t cols, std::mt19937_64& rng, float scale, const char* what,
                                fp8::Scaling scaling = fp8::Scaling::blocks) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<bf16> w(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[size_t(r * cols + c)] = float_to_bf16(std::ldexp(nd(rng), int((r / 128 + c / 128) % 3) - 1));
  return fp8::quantize_weight(scaling, w, rows, cols, what);
}

// Sample rows for the fp64 reference: the first and last 8 and 16 between.
std::vector<int64_t> sample_rows(int64_t m) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < std::min<int64_t>(8, m); ++i) r.push_back(i);
  for (int64_t i = 1; i <= 16; ++i) r.push_back(i * m / 17);
  for (int64_t i = std::max<int64_t>(0, m - 8); i < m; ++i) r.push_back(i);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

// Random activation rows over several binades (with tiny_rows every 37th row scaled by 2^-62),
// quantised by the recipe: codes [m, k] and scales [m, k / 128] (row-major, as quantize_row writes).
struct Rows {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Rows random_rows(int64_t m, int64_t k, std::mt19937_64& rng, bool tiny_rows,
                 fp8::Scaling scaling = fp8::Scaling::blocks) {
  const int64_t kb = fp8::row_scale_count(scaling, k);
  std::normal_distribution<float> nd(0.f, 1.f);
  Rows x{std::vector<uint8_t>(size_t(m * k)), std::vector<float>(size_t(m * kb))};
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < m; ++r) {
    const int tiny = !tiny_rows ? 0 : r % 37 == 5 ? -62 : r % 37 == 6 ? -74 : 0;
    for (int64_t c = 0; c < k; ++c) row[size_t(c)] = std::ldexp(nd(rng), int((3 * r + c / 128) % 5) - 2 + tiny);
    fp8::quantize_row(scaling, row.data(), k, &x.codes[size_t(r * k)], &x.scales[size_t(r * kb)]);
  }
  return x;
}

// The kernel's u codes [m, f] and scales [f / 128, m] for rows x, outputs poisoned first.
std::pair<std::vector<uint8_t>, std::vector<float>> run_dual(const Rows& x, const fp8::ScaledWeight& w1,
                                                             const fp8::ScaledWeight& w3, int64_t m, int64_t f,
                                                             int64_t k) {
  const int64_t kb = k / 128, fb = f / 128;
  std::vector<float> x_scale(size_t(kb * m));  // [k / 128, m]
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < kb; ++b) x_scale[size_t(b * m + r)] = x.scales[size_t(r * kb + b)];
  std::vector<float> w13_scale = weight_scales(w1);
  const std::vector<float> w3_scale = weight_scales(w3);
  w13_scale.insert(w13_scale.end(), w3_scale.begin(), w3_scale.end());
  DeviceBuffer<uint8_t> xd, w13d, ud;
  DeviceBuffer<float> xsd, wsd, usd;
  xd.upload(x.codes);
  xsd.upload(x_scale);
  w13d.upload(interleave_w13_e4m3(w1.data, w3.data, f, k));
  wsd.upload(w13_scale);
  const int64_t stride = weight_scale_stride(k);
  ud.upload(std::vector<uint8_t>(size_t(m * f), 0x7F));  // NaN codes
  usd.upload(std::vector<float>(size_t(fb * m), std::nanf("")));
  launch_fp8_dual_gemm_swiglu({fp8::Scaling::blocks, xd.get(), xsd.get(), w13d.get(), wsd.get(),
                               wsd.get() + fb * stride, int(stride), ud.get(), usd.get(), nullptr, int(m), int(f),
                               int(k)},
                              nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return {ud.download(size_t(m * f)), usd.download(size_t(fb * m))};
}

struct Shape {
  int64_t m, f, k;
  bool tiny_rows = false;  // every 37th row scaled by 2^-62: u's block amax below 1.3e-36, whose
                           // reciprocal scale would overflow fp32; the next by 2^-74: u's block amax
                           // below 448 * 2^-150, whose scale would underflow to 0 (scale 1, zero codes)
};

class Sm90Fp8DualGemm : public ::testing::TestWithParam<Shape> {};

TEST_P(Sm90Fp8DualGemm, FollowsTheRecipe) {
  const auto [m, f, k, tiny_rows] = GetParam();
  const int64_t kb = k / 128, fb = f / 128;
  std::mt19937_64 rng(uint64_t(m * 7 + f + k));
  const fp8::ScaledWeight w1 = random_weight(f, k, rng, 0.05f, "w1"), w3 = random_weight(f, k, rng, 0.05f, "w3");
  const Rows x = random_rows(m, k, rng, tiny_rows);
  const auto run = [&] { return run_dual(x, w1, w3, m, f, k); };
  const auto [q, s] = run();
  const auto [q2, s2] = run();
  EXPECT_TRUE(q == q2 && std::memcmp(s.data(), s2.data(), s.size() * sizeof(float)) == 0) << "runs differ";
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NE(q[i] & 0x7F, 0x7F) << "code " << i << " not written";
  for (size_t i = 0; i < s.size(); ++i) ASSERT_TRUE(std::isfinite(s[i]) && s[i] > 0.f) << "scale " << i << " not written";

  std::vector<float> gate(static_cast<size_t>(f)), up(static_cast<size_t>(f)), u(static_cast<size_t>(f)),
      want_s(static_cast<size_t>(fb));
  std::vector<uint8_t> want_q(static_cast<size_t>(f));
  int64_t checked = 0, differ = 0, underflowing = 0;
  double worst_scale = 0;
  std::vector<int64_t> rows = sample_rows(m);
  for (int64_t r = 5; tiny_rows && r < m; r += 37) {
    rows.push_back(r);
    if (r + 1 < m) rows.push_back(r + 1);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (const int64_t r : rows) {
    fp8::gemm_reference(&x.codes[size_t(r * k)], &x.scales[size_t(r * kb)], w1, 1, gate.data());
    fp8::gemm_reference(&x.codes[size_t(r * k)], &x.scales[size_t(r * kb)], w3, 1, up.data());
    for (int64_t j = 0; j < f; ++j) {
      const double g = gate[size_t(j)];
      u[size_t(j)] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[size_t(j)]);
    }
    fp8::quantize_row(fp8::Scaling::blocks, u.data(), f, want_q.data(), want_s.data());
    for (int64_t b = 0; b < fb; ++b) {
      const double rel = std::fabs(s[size_t(b * m + r)] - want_s[size_t(b)]) / want_s[size_t(b)];
      worst_scale = std::max(worst_scale, rel);
      EXPECT_LE(rel, 1e-3) << "scale of row " << r << " block " << b;
      underflowing += want_s[size_t(b)] == 1.0f && tiny_rows && r % 37 == 6;
    }
    for (int64_t j = 0; j < f; ++j) {
      const uint8_t a = q[size_t(r * f + j)], e = want_q[size_t(j)];
      ++checked;
      const float av = fp8::e4m3_to_float(a), ev = fp8::e4m3_to_float(e);
      if (av == ev) continue;  // equal codes, or +0 and -0
      ++differ;
      EXPECT_LE(std::fabs(av - ev), std::max(0.125f * std::fabs(ev) * 1.0001f, 2e-3f * fp8::kE4m3Max))
          << "row " << r << " output " << j << ": code " << int(a) << ", recipe " << int(e);
    }
  }
  std::printf("[m=%lld f=%lld k=%lld] %lld of %lld codes differ from the recipe's; worst scale error %.2g\n",
              static_cast<long long>(m), static_cast<long long>(f), static_cast<long long>(k),
              static_cast<long long>(differ), static_cast<long long>(checked), worst_scale);
  EXPECT_LE(differ, checked / 100);
  if (tiny_rows) {
    EXPECT_GT(underflowing, 0) << "no block of u small enough for its scale to underflow";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Sm90Fp8DualGemm,
                         ::testing::Values(Shape{512, 4096, 1024}, Shape{120, 4096, 1024}, Shape{40, 384, 128},
                                           Shape{150, 384, 256}, Shape{1000, 4096, 384, true},
                                           Shape{1100, 4096, 1024}, Shape{1040, 384, 128}),
                         [](const auto& info) { return "shape" + std::to_string(info.index); });

// A row's u does not depend on the other rows or on their count (fused-fp8's batch invariance): 512
// rows of the default model alone (one tile per consumer, the ring filled tile after tile) and as
// the first of 2048 (several tiles per consumer, the same rows on other CTAs).
TEST(Sm90Fp8DualGemmRows, RowsHaveTheSameBitsAtAnyRowCount) {
  constexpr int64_t f = 4096, k = 1024, small = 512, large = 2048;
  std::mt19937_64 rng(44);
  const fp8::ScaledWeight w1 = random_weight(f, k, rng, 0.05f, "w1"), w3 = random_weight(f, k, rng, 0.05f, "w3");
  const Rows x = random_rows(large, k, rng, false);
  const Rows head{std::vector<uint8_t>(x.codes.begin(), x.codes.begin() + small * k),
                  std::vector<float>(x.scales.begin(), x.scales.begin() + small * (k / 128))};
  const auto [qa, sa] = run_dual(head, w1, w3, small, f, k);
  const auto [qb, sb] = run_dual(x, w1, w3, large, f, k);
  ASSERT_EQ(std::memcmp(qa.data(), qb.data(), size_t(small * f)), 0) << "codes differ between 512 and 2048 rows";
  for (int64_t b = 0; b < f / 128; ++b)
    ASSERT_EQ(std::memcmp(&sa[size_t(b * small)], &sb[size_t(b * large)], size_t(small) * sizeof(float)), 0)
        << "scales of block " << b << " differ between 512 and 2048 rows";
}

// The rows scaling: u in bf16 (quantised per row next, fp8_quantize_rows) against the recipe on the
// host: gate and up as fp8::gemm_reference of the row-scaled codes (one fp64 sum over all of k, then
// sa[row] * sw[channel]), u = silu(gate) * up. The tensor cores add k = 1024 products of e4m3 in
// fp32 with about 14 bits inside each wgmma (no promotion between k blocks here), and u is rounded
// to bf16 (2^-9): each row's relative L2 error <= 4e-3, every value within 2% of its row's largest.
// A wrong row or channel scale, column or row gives errors of order 1. Poisoned first; two runs and
// the same rows at another row count give the same bits.
std::vector<float> run_dual_rows(const Rows& x, const fp8::ScaledWeight& w1, const fp8::ScaledWeight& w3, int64_t m,
                                 int64_t f, int64_t k) {
  std::vector<float> w13_scale = w1.scale;
  w13_scale.insert(w13_scale.end(), w3.scale.begin(), w3.scale.end());
  DeviceBuffer<uint8_t> xd, w13d;
  DeviceBuffer<float> xsd, wsd;
  DeviceBuffer<bf16> ud;
  xd.upload(x.codes);
  xsd.upload(x.scales);  // [m]
  w13d.upload(interleave_w13_e4m3(w1.data, w3.data, f, k));
  wsd.upload(w13_scale);
  ud.upload(std::vector<bf16>(size_t(m * f), bf16{0x7FC0}));  // NaN
  launch_fp8_dual_gemm_swiglu({fp8::Scaling::rows, xd.get(), xsd.get(), w13d.get(), wsd.get(), wsd.get() + f, 0,
                               nullptr, nullptr, reinterpret_cast<__nv_bfloat16*>(ud.get()), int(m), int(f), int(k)},
                              nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<bf16> u = ud.download(size_t(m * f));
  std::vector<float> out(u.size());
  std::transform(u.begin(), u.end(), out.begin(), bf16_to_float);
  return out;
}

class Sm90Fp8DualGemmRowsScaling : public ::testing::TestWithParam<Shape> {};

TEST_P(Sm90Fp8DualGemmRowsScaling, FollowsTheRecipe) {
  const auto [m, f, k, tiny_rows] = GetParam();
  const fp8::Scaling rows_scaling = fp8::Scaling::rows;
  std::mt19937_64 rng(uint64_t(m * 11 + f + k));
  const fp8::ScaledWeight w1 = random_weight(f, k, rng, 0.05f, "w1", rows_scaling),
                          w3 = random_weight(f, k, rng, 0.05f, "w3", rows_scaling);
  const Rows x = random_rows(m, k, rng, tiny_rows, rows_scaling);
  const std::vector<float> u = run_dual_rows(x, w1, w3, m, f, k);
  EXPECT_EQ(0, std::memcmp(u.data(), run_dual_rows(x, w1, w3, m, f, k).data(), u.size() * sizeof(float)))
      << "runs differ";
  for (size_t i = 0; i < u.size(); ++i) ASSERT_TRUE(std::isfinite(u[i])) << "u " << i << " not written";
  std::vector<float> gate(static_cast<size_t>(f)), up(static_cast<size_t>(f));
  double worst = 0;
  for (const int64_t r : sample_rows(m)) {
    fp8::gemm_reference(&x.codes[size_t(r * k)], &x.scales[size_t(r)], w1, 1, gate.data());
    fp8::gemm_reference(&x.codes[size_t(r * k)], &x.scales[size_t(r)], w3, 1, up.data());
    double err2 = 0, ref2 = 0, amax = 0, max_err = 0;
    for (int64_t j = 0; j < f; ++j) {
      const double g = gate[size_t(j)], want = g / (1.0 + std::exp(-g)) * up[size_t(j)];
      const double e = u[size_t(r * f + j)] - want;
      err2 += e * e;
      ref2 += want * want;
      amax = std::max(amax, std::fabs(want));
      max_err = std::max(max_err, std::fabs(e));
    }
    const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 4e-3) << "row " << r;
    EXPECT_LE(max_err, 0.02 * amax) << "row " << r;
  }
  std::printf("[rows m=%lld f=%lld k=%lld] worst row relative L2 error %.3g\n", static_cast<long long>(m),
              static_cast<long long>(f), static_cast<long long>(k), worst);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Sm90Fp8DualGemmRowsScaling,
                         ::testing::Values(Shape{512, 4096, 1024}, Shape{120, 4096, 1024}, Shape{40, 384, 128},
                                           Shape{150, 384, 256}, Shape{1000, 4096, 384}, Shape{1100, 4096, 1024}),
                         [](const auto& info) { return "shape" + std::to_string(info.index); });

TEST(Sm90Fp8DualGemmRowsScaling, RowsHaveTheSameBitsAtAnyRowCount) {
  constexpr int64_t f = 4096, k = 1024, small = 512, large = 2048;
  std::mt19937_64 rng(45);
  const fp8::ScaledWeight w1 = random_weight(f, k, rng, 0.05f, "w1", fp8::Scaling::rows),
                          w3 = random_weight(f, k, rng, 0.05f, "w3", fp8::Scaling::rows);
  const Rows x = random_rows(large, k, rng, false, fp8::Scaling::rows);
  const Rows head{std::vector<uint8_t>(x.codes.begin(), x.codes.begin() + small * k),
                  std::vector<float>(x.scales.begin(), x.scales.begin() + small)};
  const std::vector<float> a = run_dual_rows(head, w1, w3, small, f, k), b = run_dual_rows(x, w1, w3, large, f, k);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), size_t(small * f) * sizeof(float)), 0) << "u differs between 512 and 2048 rows";
}

TEST(Sm90Fp8DualGemmRefusals, WidthsThatAreNotWholeBlocks) {
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<float> s(64);
  const fp8::Scaling blocks = fp8::Scaling::blocks;
  EXPECT_THROW(launch_fp8_dual_gemm_swiglu(
                   {blocks, b.get(), s.get(), b.get(), s.get(), s.get(), 4, b.get(), s.get(), nullptr, 4, 200, 128}, nullptr),
               Error);
  EXPECT_THROW(launch_fp8_dual_gemm_swiglu(
                   {blocks, b.get(), s.get(), b.get(), s.get(), s.get(), 4, b.get(), s.get(), nullptr, 4, 128, 96}, nullptr),
               Error);
}

}  // namespace
}  // namespace swapffn::cuda
