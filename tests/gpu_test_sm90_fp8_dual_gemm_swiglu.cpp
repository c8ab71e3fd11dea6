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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/kernels/sm90_fp8_dual_gemm_swiglu.hpp"
#include "cuda/runtime/captured_graph.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/runtime/owned_handles.hpp"
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
                               wsd.get() + fb * stride, int(stride), ud.get(), usd.get(), nullptr, nullptr, int(m),
                               int(f), int(k)},
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

// The rows scaling: u in e4m3 with one scale per row, the row's amax over its n tiles reduced across
// CTAs inside the kernel. (It used to write u in bf16 for fp8_quantize_rows; its codes now come from
// the fp32 u, so they are no longer that path's bits: these tests replace the bf16 ones.) Against
// the recipe on the host: gate and up as fp8::gemm_reference of the row-scaled codes (one fp64 sum
// over all of k, then sa[row] * sw[channel]), u = silu(gate) * up. The tensor cores add k = 1024
// products of e4m3 in fp32 with about 14 bits inside each wgmma (no promotion here), so the kernel's
// u differs from the host's in the last bits: each row's scale within 5e-3 of block_scale(host
// amax); the largest code of a row with a normal scale exactly 448 (amax / scale rounds to it: every
// tile used the whole row's amax, none a larger one); each code within one e4m3 step of the host's
// u quantised with the kernel's own scale, or within 1% of 448, at most 1% of them different (one
// output channel dominates, so a tile that used a partial amax fails). Rows whose scale is far
// below fp32's normal range (the tiny rows: the division path) are checked on the values, code *
// scale against u. Every output is poisoned first; the workspace must be zero
// again after each launch (the last unit of each m tile resets it); runs, row counts, graph replays
// and launches side by side give the same bits. A kernel that deadlocks aborts the run after 60 s.

// Waits for `stream`; aborts after 60 s (a hung kernel would hold the GPU and hang the test run).
void sync_or_abort(cudaStream_t stream, const char* what) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e;
  while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      std::fprintf(stderr, "%s: still running after 60 s (a deadlock of the rows dual GEMM?)\n", what);
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CUDA_CHECK(e);
}

struct RowsOut {
  std::vector<uint8_t> codes;  // [m, f]
  std::vector<float> scales;   // [m]
  bool operator==(const RowsOut& o) const {
    return codes == o.codes && scales.size() == o.scales.size() &&
           std::memcmp(scales.data(), o.scales.data(), scales.size() * sizeof(float)) == 0;
  }
};

// The device side of one rows problem: its operands, its workspace (zeroed once) and outputs.
struct RowsProblem {
  int64_t m, f, k;
  DeviceBuffer<uint8_t> x, w13;
  DeviceBuffer<float> xs, ws, amax;
  DeviceBuffer<uint32_t> arrivals;

  RowsProblem(const Rows& rows, const fp8::ScaledWeight& w1, const fp8::ScaledWeight& w3, int64_t m_, int64_t f_,
              int64_t k_)
      : m(m_), f(f_), k(k_) {
    std::vector<float> w13_scale = w1.scale;
    w13_scale.insert(w13_scale.end(), w3.scale.begin(), w3.scale.end());
    x.upload(rows.codes.data(), size_t(m * k));
    xs.upload(rows.scales.data(), size_t(m));  // [m]
    w13.upload(interleave_w13_e4m3(w1.data, w3.data, f, k));
    ws.upload(w13_scale);
    amax.upload(std::vector<float>(size_t(m), 0.f));
    arrivals.upload(std::vector<uint32_t>(size_t(fp8_dual_gemm_row_tiles(m)), 0u));
  }
  void launch(uint8_t* u, float* us, cudaStream_t stream) const {
    launch_fp8_dual_gemm_swiglu({fp8::Scaling::rows, x.get(), xs.get(), w13.get(), ws.get(), ws.get() + f, 0, u, us,
                                 amax.get(), arrivals.get(), int(m), int(f), int(k)},
                                stream);
  }
  void expect_workspace_zero(const char* after) const {
    const std::vector<float> a = amax.download();
    const std::vector<uint32_t> c = arrivals.download();
    EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float v) { return v == 0.f; })) << "row maxima left after " << after;
    EXPECT_TRUE(std::all_of(c.begin(), c.end(), [](uint32_t v) { return v == 0u; })) << "counters left after " << after;
  }
};

// Outputs of one problem, poisoned (NaN codes and scales) until the kernel writes them.
struct RowsOutputs {
  DeviceBuffer<uint8_t> u;
  DeviceBuffer<float> us;
  RowsOutputs(int64_t m, int64_t f) : u(size_t(m * f)), us(size_t(m)) {}
  void poison(cudaStream_t stream) const {
    CUDA_CHECK(cudaMemsetAsync(u.get(), 0x7F, u.size(), stream));
    CUDA_CHECK(cudaMemsetAsync(us.get(), 0xFF, us.size() * sizeof(float), stream));
  }
  RowsOut download() const { return {u.download(), us.download()}; }
};

RowsOut run_dual_rows(const RowsProblem& prob) {
  RowsOutputs out(prob.m, prob.f);
  out.poison(nullptr);
  prob.launch(out.u.get(), out.us.get(), nullptr);
  sync_or_abort(nullptr, "rows dual GEMM");
  prob.expect_workspace_zero("a launch");
  return out.download();
}

struct RowsCase {
  fp8::ScaledWeight w1, w3;
  Rows x;
};
RowsCase rows_case(int64_t m, int64_t f, int64_t k, uint64_t seed, bool tiny_rows = false) {
  std::mt19937_64 rng(seed);
  RowsCase c{random_weight(f, k, rng, 0.05f, "w1", fp8::Scaling::rows),
             random_weight(f, k, rng, 0.05f, "w3", fp8::Scaling::rows), {}};
  // One dominant output channel (w3's scale x 8), in one n tile: a tile that quantised with its own
  // amax instead of the row's would give codes about 8 times too large, far beyond one e4m3 step.
  c.w3.scale[size_t(f / 2 + 5)] *= 8.f;
  c.x = random_rows(m, k, rng, tiny_rows, fp8::Scaling::rows);
  return c;
}

class Sm90Fp8DualGemmRowsScaling : public ::testing::TestWithParam<Shape> {};

TEST_P(Sm90Fp8DualGemmRowsScaling, FollowsTheRecipe) {
  const auto [m, f, k, tiny_rows] = GetParam();
  const RowsCase rc = rows_case(m, f, k, uint64_t(m * 11 + f + k), tiny_rows);
  const RowsProblem prob(rc.x, rc.w1, rc.w3, m, f, k);
  const RowsOut out = run_dual_rows(prob);
  EXPECT_TRUE(out == run_dual_rows(prob)) << "runs differ";
  for (size_t i = 0; i < out.codes.size(); ++i) ASSERT_NE(out.codes[i] & 0x7F, 0x7F) << "code " << i << " not written";
  for (size_t i = 0; i < out.scales.size(); ++i)
    ASSERT_TRUE(std::isfinite(out.scales[i]) && out.scales[i] > 0.f) << "scale " << i << " not written";

  std::vector<float> gate(static_cast<size_t>(f)), up(static_cast<size_t>(f)), u(static_cast<size_t>(f));
  std::vector<int64_t> rows = sample_rows(m);
  for (int64_t r = 5; tiny_rows && r < m; r += 37) {
    rows.push_back(r);
    if (r + 1 < m) rows.push_back(r + 1);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  int64_t checked = 0, differ = 0, tiny_checked = 0;
  double worst_scale = 0;
  for (const int64_t r : rows) {
    fp8::gemm_reference(&rc.x.codes[size_t(r * k)], &rc.x.scales[size_t(r)], rc.w1, 1, gate.data());
    fp8::gemm_reference(&rc.x.codes[size_t(r * k)], &rc.x.scales[size_t(r)], rc.w3, 1, up.data());
    float amax = 0.f;
    for (int64_t j = 0; j < f; ++j) {
      const double g = gate[size_t(j)];
      u[size_t(j)] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[size_t(j)]);
      amax = std::max(amax, std::fabs(u[size_t(j)]));
    }
    const float s = out.scales[size_t(r)], want_s = fp8::block_scale(amax);
    const uint8_t* q = &out.codes[size_t(r * f)];
    if (want_s < 0x1p-100f) {  // a tiny row: its scale divides; compare the values
      ++tiny_checked;
      for (int64_t j = 0; j < f; ++j)
        EXPECT_LE(std::fabs(double(fp8::e4m3_to_float(q[j])) * s - u[size_t(j)]),
                  0.07 * std::fabs(u[size_t(j)]) + 0.02 * amax + 0x1p-140)
            << "tiny row " << r << " output " << j;
      continue;
    }
    const double rel = std::fabs(s - want_s) / want_s;
    worst_scale = std::max(worst_scale, rel);
    EXPECT_LE(rel, 5e-3) << "scale of row " << r;
    float largest = 0.f;
    for (int64_t j = 0; j < f; ++j) {
      const float av = fp8::e4m3_to_float(q[j]), ev = fp8::e4m3_to_float(fp8::e4m3_from_float(u[size_t(j)] / s));
      largest = std::max(largest, std::fabs(av));
      ++checked;
      if (av == ev) continue;  // equal codes, or +0 and -0
      ++differ;
      EXPECT_LE(std::fabs(av - ev), std::max(0.125f * std::fabs(ev) * 1.0001f, 0.01f * fp8::kE4m3Max))
          << "row " << r << " output " << j << ": code " << int(q[j]) << ", host " << ev;
    }
    EXPECT_EQ(largest, fp8::kE4m3Max) << "row " << r << ": its codes do not reach 448 (scale " << s << ")";
  }
  std::printf("[rows m=%lld f=%lld k=%lld] %lld of %lld codes differ from the host's at the kernel's scales; worst "
              "scale error %.2g; %lld tiny rows\n",
              static_cast<long long>(m), static_cast<long long>(f), static_cast<long long>(k),
              static_cast<long long>(differ), static_cast<long long>(checked), worst_scale,
              static_cast<long long>(tiny_checked));
  EXPECT_LE(differ, checked / 100);
  if (tiny_rows) {
    EXPECT_GT(tiny_checked, 0) << "no row small enough for its scale to divide";
  }
}

// The default model's shapes at B = 1, 3, 16 and 64 (M = 512 B: 1, 2, 8 and 32 rounds of the walk
// over 64 clusters), partial 64-row tiles (120, 1000, 1100), the tiny model's (a cluster's second
// CTA without rows at 40; three m tiles at 150), 3 k blocks with tiny rows.
INSTANTIATE_TEST_SUITE_P(Shapes, Sm90Fp8DualGemmRowsScaling,
                         ::testing::Values(Shape{512, 4096, 1024}, Shape{120, 4096, 1024}, Shape{40, 384, 128},
                                           Shape{150, 384, 256}, Shape{1000, 4096, 384, true},
                                           Shape{1100, 4096, 1024}, Shape{1536, 4096, 1024}, Shape{8192, 4096, 1024},
                                           Shape{32768, 4096, 1024}),
                         [](const auto& info) { return "shape" + std::to_string(info.index); });

// A row's codes and scale do not depend on the row count (batch invariance: its amax is a max over
// its own outputs, order-free): the first rows of 32768 (B = 64) alone at 200 (a partial tile),
// 512, 1536 and 8192 rows.
TEST(Sm90Fp8DualGemmRowsScaling, RowsHaveTheSameBitsAtAnyRowCount) {
  constexpr int64_t f = 4096, k = 1024, large = 32768;
  const RowsCase rc = rows_case(large, f, k, 45);
  const RowsOut all = run_dual_rows(RowsProblem(rc.x, rc.w1, rc.w3, large, f, k));
  for (const int64_t m : {int64_t{200}, int64_t{512}, int64_t{1536}, int64_t{8192}}) {
    const RowsOut part = run_dual_rows(RowsProblem(rc.x, rc.w1, rc.w3, m, f, k));
    EXPECT_EQ(std::memcmp(part.codes.data(), all.codes.data(), size_t(m * f)), 0)
        << "codes differ between " << m << " and " << large << " rows";
    EXPECT_EQ(std::memcmp(part.scales.data(), all.scales.data(), size_t(m) * sizeof(float)), 0)
        << "scales differ between " << m << " and " << large << " rows";
  }
}

// The workspace resets itself: launches back to back on one stream (each a programmatic dependent
// of the previous), then two launches captured in a CUDA graph and replayed twice, give the bits of
// the first launch, and leave the workspace zero.
TEST(Sm90Fp8DualGemmRowsScaling, RepeatedLaunchesAndGraphReplaysGiveTheSameBits) {
  constexpr int64_t m = 1100, f = 4096, k = 1024;
  const RowsCase rc = rows_case(m, f, k, 46);
  const RowsProblem prob(rc.x, rc.w1, rc.w3, m, f, k);
  const RowsOut want = run_dual_rows(prob);
  OwnedStream stream;
  std::vector<std::unique_ptr<RowsOutputs>> outs;
  for (int i = 0; i < 5; ++i) outs.push_back(std::make_unique<RowsOutputs>(m, f));
  for (int i = 0; i < 3; ++i) outs[size_t(i)]->poison(stream.s);
  for (int i = 0; i < 3; ++i) prob.launch(outs[size_t(i)]->u.get(), outs[size_t(i)]->us.get(), stream.s);
  sync_or_abort(stream.s, "rows dual GEMM, three launches back to back");
  prob.expect_workspace_zero("three launches");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(outs[size_t(i)]->download() == want) << "launch " << i << " differs";

  const CapturedGraph graph(stream.s, [&] {
    for (int i = 3; i < 5; ++i) prob.launch(outs[size_t(i)]->u.get(), outs[size_t(i)]->us.get(), stream.s);
  });
  for (int replay = 0; replay < 2; ++replay) {
    for (int i = 3; i < 5; ++i) outs[size_t(i)]->poison(stream.s);
    graph.launch(stream.s);
    sync_or_abort(stream.s, "rows dual GEMM, graph replay");
    prob.expect_workspace_zero("a graph replay");
    for (int i = 3; i < 5; ++i)
      EXPECT_TRUE(outs[size_t(i)]->download() == want) << "replay " << replay << ", launch " << i << " differs";
  }
}

// Two launches side by side on two streams (fused-fp8's row groups), each sized for the whole GPU,
// with their own workspaces: the cooperative launch keeps every CTA of each resident, so neither
// waits for SMs that the other's spinning CTAs hold. Twenty rounds; each gives its own bits.
TEST(Sm90Fp8DualGemmRowsScaling, LaunchesSideBySideOnTwoStreamsComplete) {
  constexpr int64_t m = 8192, f = 4096, k = 1024;
  const RowsCase a = rows_case(m, f, k, 47), b = rows_case(m, f, k, 48);
  const RowsProblem pa(a.x, a.w1, a.w3, m, f, k), pb(b.x, b.w1, b.w3, m, f, k);
  const RowsOut want_a = run_dual_rows(pa), want_b = run_dual_rows(pb);
  OwnedStream sa, sb;
  const RowsOutputs oa(m, f), ob(m, f);
  for (int round = 0; round < 20; ++round) {
    oa.poison(sa.s);
    ob.poison(sb.s);
    CUDA_CHECK(cudaDeviceSynchronize());
    pa.launch(oa.u.get(), oa.us.get(), sa.s);
    pb.launch(ob.u.get(), ob.us.get(), sb.s);
    sync_or_abort(sa.s, "rows dual GEMM on stream a");
    sync_or_abort(sb.s, "rows dual GEMM on stream b");
    ASSERT_TRUE(oa.download() == want_a) << "stream a, round " << round;
    ASSERT_TRUE(ob.download() == want_b) << "stream b, round " << round;
  }
  pa.expect_workspace_zero("the side-by-side launches");
  pb.expect_workspace_zero("the side-by-side launches");
}

TEST(Sm90Fp8DualGemmRefusals, RowsWiderThanTheResidentClusters) {
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<float> s(64);
  DeviceBuffer<uint32_t> c(64);
  // f = 128 * 1024: 1024 tiles per row, more clusters than any Hopper holds at once.
  EXPECT_THROW(launch_fp8_dual_gemm_swiglu({fp8::Scaling::rows, b.get(), s.get(), b.get(), s.get(), s.get(), 0, b.get(),
                                            s.get(), s.get(), c.get(), 4, 128 * 1024, 128},
                                           nullptr),
               Error);
}

TEST(Sm90Fp8DualGemmRefusals, WidthsThatAreNotWholeBlocks) {
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<float> s(64);
  const fp8::Scaling blocks = fp8::Scaling::blocks;
  EXPECT_THROW(launch_fp8_dual_gemm_swiglu(
                   {blocks, b.get(), s.get(), b.get(), s.get(), s.get(), 4, b.get(), s.get(), nullptr, nullptr, 4, 200, 128},
                   nullptr),
               Error);
  EXPECT_THROW(launch_fp8_dual_gemm_swiglu(
                   {blocks, b.get(), s.get(), b.get(), s.get(), s.get(), 4, b.get(), s.get(), nullptr, nullptr, 4, 128, 96},
                   nullptr),
               Error);
}

}  // namespace
}  // namespace swapffn::cuda
