// BatchInvariantGemm with scaled e4m3 operands against fp8::gemm_reference: the recipe's product of
// the same codes and scales, group sums in fp64. Both scalings: blocks (cuBLASLt's BLK128x128_32F
// weight scales and VEC128_32F activation scales, Hopper) and rows (OUTER_VEC_32F for both). Tolerance: relative L2 error over the checked rows
// <= 1e-3 with fp32 output, <= 4e-3 with bf16 output. Why not ~1e-6: Hopper's fp8 tensor cores
// keep about 14 bits while they add inside a k-block (DeepSeek-V3 report, section 3.3.2), cuBLASLt
// promotes to fp32 per 128-k block, so block sums carry ~1e-4 relative error; bf16 output adds its
// rounding (2^-9). A wrong scale layout (a transposed index, the weight's missing k-block pad, a
// mixed-up row) gives errors of order 1. Also: a row's bits do not depend on the row count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

constexpr size_t kWorkspace = size_t{32} << 20;

// A product's operands on the host, quantised by the recipe: the weight [n, k] in 128x128 blocks,
// the activations [rows, k] row by row in 1x128 blocks. Values spread over several binades between
// blocks, so that every block has its own scale and a scale applied to the wrong block shows.
struct HostOperands {
  int64_t rows, n, k;
  int64_t kb;  // activation scales per row
  fp8::ScaledWeight w;
  std::vector<uint8_t> x;      // [rows, k] e4m3
  std::vector<float> x_scale;  // [rows, kb], as fp8::quantize_row writes them
};

HostOperands make_operands(int64_t rows, int64_t n, int64_t k, uint64_t seed,
                           fp8::Scaling scaling = fp8::Scaling::blocks) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t kb = fp8::row_scale_count(scaling, k);
  HostOperands o{rows, n, k, kb, {}, std::vector<uint8_t>(size_t(rows * k)), std::vector<float>(size_t(rows * kb))};
  std::vector<bf16> w(size_t(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      w[size_t(r * k + c)] = float_to_bf16(0.05f * std::ldexp(nd(rng), int((r / 128 + 2 * (c / 128)) % 5) - 2));
  o.w = fp8::quantize_weight(scaling, w, n, k, "test weight");
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) row[size_t(c)] = std::ldexp(nd(rng), int((7 * r + 3 * (c / 128)) % 9) - 4);
    fp8::quantize_row(scaling, row.data(), k, &o.x[size_t(r * k)], &o.x_scale[size_t(r * kb)]);
  }
  return o;
}

// The activation scales of rows [r0, r0 + rows) in cuBLASLt's layout: [kb, rows].
std::vector<float> rows_innermost(const HostOperands& o, int64_t r0, int64_t rows) {
  const int64_t kb = o.kb;
  std::vector<float> s(size_t(kb * rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < kb; ++b) s[size_t(b * rows + r)] = o.x_scale[size_t((r0 + r) * kb + b)];
  return s;
}

// The operands on the device; the activation scales are laid out per product (their stride is the
// product's row count).
struct DeviceOperands {
  DeviceBuffer<uint8_t> w, x;
  DeviceBuffer<float> w_scale;
  explicit DeviceOperands(const HostOperands& o) {
    w.upload(o.w.data);
    w_scale.upload(weight_scales(o.w));
    x.upload(o.x);
  }
};

// Rows [r0, r0 + rows) through g into `out` (device, out_type), starting from `start` (used when
// accumulating; else the output is poisoned with NaN first); returns the outputs widened to fp32.
std::vector<float> run_rows(const BatchInvariantGemm& g, const HostOperands& o, const DeviceOperands& d, int64_t r0,
                            int64_t rows, bool bf16_out, const std::vector<float>* start) {
  DeviceBuffer<float> xs;
  xs.upload(rows_innermost(o, r0, rows));
  const size_t n_out = size_t(rows * o.n);
  DeviceBuffer<uint8_t> out(n_out * (bf16_out ? 2 : 4)), ws(kWorkspace);
  if (bf16_out) {
    std::vector<bf16> init(n_out, bf16{0x7FC0});  // NaN
    if (start)
      for (size_t i = 0; i < n_out; ++i) init[i] = float_to_bf16((*start)[i]);
    CUDA_CHECK(cudaMemcpy(out.get(), init.data(), n_out * 2, cudaMemcpyHostToDevice));
  } else {
    std::vector<float> init = start ? *start : std::vector<float>(n_out, std::numeric_limits<float>::quiet_NaN());
    CUDA_CHECK(cudaMemcpy(out.get(), init.data(), n_out * 4, cudaMemcpyHostToDevice));
  }
  g.run(rows, ScaledOperand{d.w.get(), d.w_scale.get()}, ScaledOperand{d.x.get() + r0 * o.k, xs.get()}, out.get(),
        ws.get(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(n_out);
  if (bf16_out) {
    std::vector<bf16> h(n_out);
    CUDA_CHECK(cudaMemcpy(h.data(), out.get(), n_out * 2, cudaMemcpyDeviceToHost));
    std::transform(h.begin(), h.end(), got.begin(), bf16_to_float);
  } else {
    CUDA_CHECK(cudaMemcpy(got.data(), out.get(), n_out * 4, cudaMemcpyDeviceToHost));
  }
  return got;
}

// The rows the reference checks (it costs n * k fp64 products per row): the first and last 16 and
// 16 spread between.
std::vector<int64_t> checked_rows(int64_t rows) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < std::min<int64_t>(16, rows); ++i) r.push_back(i);
  for (int64_t i = 1; i <= 16; ++i) r.push_back(i * rows / 17);
  for (int64_t i = std::max<int64_t>(0, rows - 16); i < rows; ++i) r.push_back(i);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

struct Shape {
  const char* what;
  int64_t rows, n, k;
  bool bf16_out, accumulate;
  fp8::Scaling scaling = fp8::Scaling::blocks;
};

class Fp8Gemm : public ::testing::TestWithParam<Shape> {};

TEST_P(Fp8Gemm, AgreesWithTheRecipesReference) {
  const Shape s = GetParam();
  const HostOperands o = make_operands(s.rows, s.n, s.k, 1000 + uint64_t(s.rows + s.n + s.k), s.scaling);
  const DeviceOperands d(o);
  OwnedLtHandle lt;
  BatchInvariantGemm g(lt.h, s.n, s.k, s.bf16_out ? CUDA_R_16BF : CUDA_R_32F, s.accumulate, 512, kWorkspace,
                       GemmOperands::scaled_e4m3(s.scaling));
  g.set_rows(s.rows);
  std::printf("[%s rows=%lld n=%lld k=%lld] anchor %s; at these rows %s\n", s.what, static_cast<long long>(s.rows),
              static_cast<long long>(s.n), static_cast<long long>(s.k), g.describe().c_str(),
              g.describe(s.rows).c_str());
  std::vector<float> start;
  if (s.accumulate) {
    std::mt19937_64 rng(77);
    std::normal_distribution<float> nd(0.f, 1.f);
    start.resize(size_t(s.rows * s.n));
    for (auto& v : start) v = s.bf16_out ? round_bf16(nd(rng)) : nd(rng);
  }
  const std::vector<float> got = run_rows(g, o, d, 0, s.rows, s.bf16_out, s.accumulate ? &start : nullptr);

  const int64_t kb = o.kb;
  double err2 = 0, ref2 = 0;
  std::vector<float> want(static_cast<size_t>(s.n));
  for (const int64_t r : checked_rows(s.rows)) {
    fp8::gemm_reference(&o.x[size_t(r * s.k)], &o.x_scale[size_t(r * kb)], o.w, 1, want.data());
    for (int64_t j = 0; j < s.n; ++j) {
      const double base = s.accumulate ? start[size_t(r * s.n + j)] : 0.0;
      const double g_v = got[size_t(r * s.n + j)];
      ASSERT_TRUE(std::isfinite(g_v)) << "row " << r << " column " << j << " not written or not finite";
      // The product's own error, against the product (not against an accumulator it is added to).
      const double e = g_v - base - want[size_t(j)];
      err2 += e * e;
      ref2 += double(want[size_t(j)]) * want[size_t(j)];
    }
  }
  const double rel = std::sqrt(err2 / ref2), tol = s.bf16_out ? 4e-3 : 1e-3;
  std::printf("[%s] relative L2 error %.3g (tolerance %.0e)\n", s.what, rel, tol);
  EXPECT_LE(rel, tol);
  EXPECT_GT(ref2, 0.0);
}

// The engine's products: the default model's w1|w3 GEMM (bf16 out, n = 2F) and w2 GEMM (fp32 h +=),
// at B = 1 and 3 (512 * B rows); the tiny model's (k = 128 and 384: one and three k-blocks, so the
// weight scales' pad to four blocks matters), at 120 rows; a 4-row product.
INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8Gemm,
    ::testing::Values(Shape{"default up B=1", 512, 8192, 1024, true, false},
                      Shape{"default down B=1", 512, 1024, 4096, false, true},
                      Shape{"default up B=3", 1536, 8192, 1024, true, false},
                      Shape{"default down B=3", 1536, 1024, 4096, false, true},
                      Shape{"default down B=1 no residual", 512, 1024, 4096, false, false},
                      Shape{"tiny up", 120, 768, 128, true, false}, Shape{"tiny down", 120, 128, 384, false, true},
                      Shape{"four rows", 4, 256, 384, false, false},
                      Shape{"rows: default up B=1", 512, 8192, 1024, true, false, fp8::Scaling::rows},
                      Shape{"rows: default down B=1", 512, 1024, 4096, false, true, fp8::Scaling::rows},
                      Shape{"rows: default down B=3", 1536, 1024, 4096, false, true, fp8::Scaling::rows},
                      Shape{"rows: tiny up", 120, 768, 128, true, false, fp8::Scaling::rows},
                      Shape{"rows: tiny down", 120, 128, 384, false, true, fp8::Scaling::rows},
                      Shape{"rows: four rows", 4, 256, 384, false, false, fp8::Scaling::rows}),
    [](const auto& info) { return "shape" + std::to_string(info.index); });

// A row's bits must not depend on how many rows share the product (the engine's batch invariance):
// rows of an 8192-row product against the same rows in 512-row products (the anchor's row count)
// and in one 1000-row product, accumulating into fp32 as the down GEMM does.
class Fp8GemmBatchInvariance : public ::testing::TestWithParam<fp8::Scaling> {};
INSTANTIATE_TEST_SUITE_P(Scalings, Fp8GemmBatchInvariance, ::testing::Values(fp8::Scaling::blocks, fp8::Scaling::rows),
                         [](const auto& info) { return std::string(fp8::scaling_name(info.param)); });

TEST_P(Fp8GemmBatchInvariance, RowBitsDoNotDependOnTheRowCount) {
  constexpr int64_t n = 1024, k = 4096, big = 8192;
  const HostOperands o = make_operands(big, n, k, 4242, GetParam());
  const DeviceOperands d(o);
  OwnedLtHandle lt;
  BatchInvariantGemm g(lt.h, n, k, CUDA_R_32F, /*accumulate=*/true, 512, kWorkspace,
                       GemmOperands::scaled_e4m3(GetParam()));
  for (const int64_t rows : {big, int64_t{1000}, int64_t{512}}) g.set_rows(rows);
  std::printf("anchor: %s\n8192 rows: %s\n1000 rows: %s\n", g.describe().c_str(), g.describe(big).c_str(),
              g.describe(1000).c_str());
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> start(size_t(big * n));
  for (auto& v : start) v = nd(rng);
  const std::vector<float> all = run_rows(g, o, d, 0, big, false, &start);
  ASSERT_NE(0, std::memcmp(all.data(), start.data(), all.size() * sizeof(float))) << "the product changed nothing";
  const auto expect_same = [&](int64_t r0, int64_t rows) {
    const std::vector<float> part_start(start.begin() + r0 * n, start.begin() + (r0 + rows) * n);
    const std::vector<float> part = run_rows(g, o, d, r0, rows, false, &part_start);
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(0, std::memcmp(&part[size_t(r * n)], &all[size_t((r0 + r) * n)], size_t(n) * sizeof(float)))
          << "row " << r0 + r << " differs between the 8192-row product and a " << rows << "-row one";
  };
  expect_same(0, 1000);
  for (const int64_t r0 : {int64_t{0}, int64_t{512}, int64_t{4096}, big - 512}) expect_same(r0, 512);
}

// What cuBLASLt or the wrapper cannot run is refused before any product, naming it.
TEST(Fp8GemmRefusals, RowCountsAndShapesOutsideTheLayouts) {
  OwnedLtHandle lt;
  BatchInvariantGemm g(lt.h, 256, 384, CUDA_R_32F, false, 512, kWorkspace,
                       GemmOperands::scaled_e4m3(fp8::Scaling::blocks));
  try {
    g.set_rows(6);
    ADD_FAILURE() << "6 rows were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("VEC128_32F"), std::string::npos) << e.what();
  }
  EXPECT_THROW(BatchInvariantGemm(lt.h, 256, 100, CUDA_R_32F, false, 512, kWorkspace,
                                  GemmOperands::scaled_e4m3(fp8::Scaling::blocks)),
               Error);
  g.set_rows(8);
  DeviceBuffer<uint8_t> dummy(4096);
  EXPECT_THROW(g.run(8, dummy.get(), dummy.get(), dummy.get(), dummy.get(), nullptr), Error);  // no scales given
}

}  // namespace
}  // namespace swapffn::cuda
