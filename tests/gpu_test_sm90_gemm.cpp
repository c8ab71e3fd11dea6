// The fused backend's Hopper GEMMs against a CPU computation on the same bf16 operands:
// the SwiGLU dual GEMM and the residual down GEMM (with and without the split-K cluster), for row
// counts that are and are not multiples of the 128-row tile. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "gpu_backend_test_util.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/kernels/sm90_bf16_gemm_residual_cutlass.hpp"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

std::vector<bf16> random_bf16(size_t n, std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<bf16> v(n);
  for (auto& e : v) e = float_to_bf16(nd(rng));
  return v;
}

template <class T>
std::vector<T> download(const DeviceBuffer<T>& d, size_t n) {
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

double dot(const bf16* a, const bf16* b, int k) {
  double s = 0;
  for (int i = 0; i < k; ++i) s += double(bf16_to_float(a[i])) * bf16_to_float(b[i]);
  return s;
}

struct DualCase {
  int m, f, k;
  GemmVariant v;
  float a_scale = 1.f;  // std of the activations; the gate sums have about the same std
};

class DualGemm : public ::testing::TestWithParam<DualCase> {};

TEST_P(DualGemm, MatchesCpuAndIsDeterministic) {
  SKIP_WITHOUT_HOPPER();
  const auto [m, f, k, v, a_scale] = GetParam();
  std::mt19937_64 rng(1000 + m + f + k + v.bn);
  const auto a = random_bf16(size_t(m) * k, rng, a_scale);
  const auto w1 = random_bf16(size_t(f) * k, rng, 1.f / std::sqrt(float(k)));
  const auto w3 = random_bf16(size_t(f) * k, rng, 1.f / std::sqrt(float(k)));
  DeviceBuffer<bf16> da, dw, du;
  da.upload(a);
  dw.upload(interleave_w13(w1, w3, f, k));
  constexpr size_t kGuard = 512;  // poisoned elements after u: no store may reach them
  du.resize(size_t(m) * f + kGuard);
  DualGemmSwigluArgs args{reinterpret_cast<const __nv_bfloat16*>(da.get()),
                          reinterpret_cast<const __nv_bfloat16*>(dw.get()), reinterpret_cast<__nv_bfloat16*>(du.get()),
                          m, 2 * f, k};
  std::vector<std::vector<bf16>> runs;
  for (int r = 0; r < 2; ++r) {
    CUDA_CHECK(cudaMemset(du.get(), 0xFF, (size_t(m) * f + kGuard) * 2));  // NaN poison
    launch_dual_gemm_swiglu(args, v, nullptr, false);
    SWAPFFN_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    runs.push_back(download(du, size_t(m) * f + kGuard));
  }
  ASSERT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 2)) << "not deterministic";
  for (size_t i = size_t(m) * f; i < runs[0].size(); ++i)
    ASSERT_EQ(0xFFFF, runs[0][i].bits) << "a store reached " << i - size_t(m) * f << " elements past u";
  std::vector<double> refs(size_t(m) * f);
  double err2 = 0, ref2 = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < f; ++j) {
      const double g = dot(&a[size_t(i) * k], &w1[size_t(j) * k], k);
      const double up = dot(&a[size_t(i) * k], &w3[size_t(j) * k], k);
      const double ref = g / (1 + std::exp(-g)) * up;
      const double got = bf16_to_float(runs[0][size_t(i) * f + j]);
      ASSERT_TRUE(std::isfinite(got)) << "u[" << i << "," << j << "] not written";
      refs[size_t(i) * f + j] = ref;
      err2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  EXPECT_LT(std::sqrt(err2 / ref2), 5e-3) << "rel L2 error (bf16 output rounding is ~2e-3)";
  // Element-wise too, so a few misplaced outputs (a wrong staging offset) cannot hide in the L2 norm:
  // bf16 rounding (2^-8 relative) plus fp32 summation error, against the outputs' RMS.
  const double rms = std::sqrt(ref2 / double(refs.size()));
  for (size_t i = 0; i < refs.size(); ++i)
    ASSERT_LE(std::fabs(bf16_to_float(runs[0][i]) - refs[i]), 1e-2 * std::fabs(refs[i]) + 1e-3 * rms)
        << "u[" << i / f << "," << i % f << "]";
}

// Every compiled variant; M = 40 and 300 leave partial tiles (and, with multicast, a cluster whose
// second CTA has no rows at all). F = 72 (2F = 144) leaves a partial weight tile for every width,
// whose outputs past F the store must clip; widths that are not a multiple of 128 (bn 176) have a
// partial last tile at every F here.
std::vector<DualCase> dual_cases() {
  std::vector<DualCase> out;
  for (const auto& v : dual_gemm_variants()) {
    out.push_back({512, 512, 256, v});
    out.push_back({40, 384, 128, v});
    out.push_back({300, 256, 192, v});
    out.push_back({200, 72, 128, v});
    out.push_back({128, 128, 64, v});  // one k-step: the first MMA (scale-d 0) is also the last
    // Gate sums of std 12: the SiLU's saturated ends (tanh = +-1, silu(g) = g or 0) and the steep
    // middle, where an error in the SiLU formula shows.
    out.push_back({256, 256, 128, v, 12.f});
    // Persistent: more tiles than SMs, and 3 k-steps per tile, so the stage ring wraps across tiles.
    if (v.persistent) out.push_back({2000, 2048, 192, v});
    // Two CTAs per SM: more CTAs than fit at once, and 4 k-steps on 3 stages, so the epilogue's
    // staging (the last stage's A rows) is not stage 0.
    if (v.ctas_per_sm > 1) out.push_back({2000, 2048, 256, v});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Variants, DualGemm, ::testing::ValuesIn(dual_cases()));

struct ResidualCase {
  int m, n, k;
  GemmVariant v;
  bool residual;
};

// Random operands of h (+)= A W^T on the host and the device: A [m, k], W [n, k], h0 [m, n].
struct ResidualOperands {
  std::vector<bf16> a, w;
  std::vector<float> h0;
  DeviceBuffer<bf16> da, dw;
  DeviceBuffer<float> dh;
  ResidualOperands(int m, int n, int k, uint64_t seed) {
    std::mt19937_64 rng(seed);
    a = random_bf16(size_t(m) * k, rng, 1.f);
    w = random_bf16(size_t(n) * k, rng, 1.f / std::sqrt(float(k)));
    h0.resize(size_t(m) * n);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& e : h0) e = nd(rng);
    da.upload(a);
    dw.upload(w);
    dh.resize(h0.size());
  }
};

// h (+)= A W^T through `launch` (which takes the arguments) against the CPU: h poisoned with NaN
// without the residual, every output finite and within fp32 accumulation error, two runs bitwise
// equal.
template <class Launch>
void expect_residual_gemm_correct(int m, int n, int k, bool residual, uint64_t seed, Launch&& launch) {
  ResidualOperands ops(m, n, k, seed);
  auto& [a, w, h0, da, dw, dh] = ops;
  const GemmResidualArgs args{reinterpret_cast<const __nv_bfloat16*>(da.get()),
                              reinterpret_cast<const __nv_bfloat16*>(dw.get()), dh.get(), m, n, k, residual};
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    if (residual) {
      dh.upload(h0);
    } else {
      CUDA_CHECK(cudaMemset(dh.get(), 0xFF, h0.size() * 4));  // NaN poison
    }
    launch(args);
    SWAPFFN_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    runs.push_back(download(dh, h0.size()));
  }
  ASSERT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * 4)) << "not deterministic";
  double max_err = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const double ref = (residual ? h0[size_t(i) * n + j] : 0.0) + dot(&a[size_t(i) * k], &w[size_t(j) * k], k);
      const double got = runs[0][size_t(i) * n + j];
      ASSERT_TRUE(std::isfinite(got)) << "h[" << i << "," << j << "] not written";
      max_err = std::max(max_err, std::abs(got - ref));
    }
  EXPECT_LT(max_err, 1e-3) << "fp32 accumulation of O(1) terms";
}

class ResidualGemm : public ::testing::TestWithParam<ResidualCase> {};

TEST_P(ResidualGemm, MatchesCpuAndIsDeterministic) {
  SKIP_WITHOUT_HOPPER();
  const auto [m, n, k, v, residual] = GetParam();
  expect_residual_gemm_correct(m, n, k, residual, 2000 + m + n + k + v.bn + v.split_k + v.bm + 7 * v.stages + 13 * v.multicast,
                               [&](const GemmResidualArgs& args) { launch_gemm_residual(args, v, nullptr, false); });
}

std::vector<ResidualCase> residual_cases() {
  std::vector<ResidualCase> out;
  for (const auto& v : down_gemm_variants()) {
    out.push_back({512, 256, 1024, v, true});
    out.push_back({40, 256, 64 * v.split_k * (v.split_k == 4 ? 1 : 3), v, true});  // the shortest K of split 4
    out.push_back({300, 256, 512, v, false});
    // Persistent: more tiles than SMs and a stage ring that wraps across tiles.
    if (v.persistent) out.push_back({2000, 1024, 320, v, true});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Variants, ResidualGemm, ::testing::ValuesIn(residual_cases()));

struct CutlassCase {
  int m, n, k;
  std::string variant;
  bool residual;
};

class CutlassResidualGemm : public ::testing::TestWithParam<CutlassCase> {};

// CUTLASS's down GEMM kernels: the same product, checked the same way.
TEST_P(CutlassResidualGemm, MatchesCpuAndIsDeterministic) {
  SKIP_WITHOUT_HOPPER();
  const auto& [m, n, k, variant, residual] = GetParam();
  expect_residual_gemm_correct(m, n, k, residual, 3000 + m + n + k + variant.size(), [&](const GemmResidualArgs& args) {
    launch_cutlass_gemm_residual(args, variant, nullptr, false);
  });
}

// Partial tiles (M = 40, 300: a cluster whose second CTA has no rows), one k-tile (K = 64), and more
// tiles than SMs (the persistent schedulers walk several tiles per CTA).
std::vector<CutlassCase> cutlass_cases() {
  std::vector<CutlassCase> out;
  for (const auto& v : cutlass_down_variants()) {
    out.push_back({512, 256, 1024, v, true});
    out.push_back({40, 256, 64, v, true});
    out.push_back({300, 256, 512, v, false});
    out.push_back({2000, 1024, 320, v, true});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Variants, CutlassResidualGemm, ::testing::ValuesIn(cutlass_cases()),
                         [](const auto& info) { return info.param.variant + "_" + std::to_string(info.index); });

TEST(CutlassResidualGemm, RefusesUnknownVariantsAndShapesNamingThem) {
  SKIP_WITHOUT_HOPPER();
  const GemmResidualArgs args{nullptr, nullptr, nullptr, 64, 256, 1024, true};
  try {
    launch_cutlass_gemm_residual(args, "pp_64x64_c9", nullptr, false);
    ADD_FAILURE() << "unknown variant accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pp_64x64_c9"), std::string::npos) << e.what();
  }
  ResidualOperands ops(64, 256, 1028, 5);  // K = 1028: rows of u are not 16-byte aligned for the TMA
  try {
    launch_cutlass_gemm_residual({reinterpret_cast<const __nv_bfloat16*>(ops.da.get()),
                                  reinterpret_cast<const __nv_bfloat16*>(ops.dw.get()), ops.dh.get(), 64, 256, 1028, true},
                                 "pp_64x64_c1x2", nullptr, false);
    ADD_FAILURE() << "K = 1028 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("K = 1028"), std::string::npos) << e.what();
  }
}

// Batch invariance of the down GEMM: the split fixes each output's summation order, so variants of
// one split give the same bits whatever their tile shape, multicast and the number of rows (the
// first 130 rows alone, or among 1100 rows of the same operands). CUTLASS's kernels do not split K:
// they must give the split-1 bits.
TEST(ResidualGemm, SameSplitGivesSameBitsForAnyTileAndRowCount) {
  SKIP_WITHOUT_HOPPER();
  const int n = 1024, k = 4096, big = 1100, small = 130;
  ResidualOperands ops(big, n, k, 4242);
  auto& [a, w, h0, da, dw, dh] = ops;
  const auto run = [&](const GemmVariant& v, int m) {
    dh.upload(h0);
    launch_gemm_residual({reinterpret_cast<const __nv_bfloat16*>(da.get()), reinterpret_cast<const __nv_bfloat16*>(dw.get()),
                          dh.get(), m, n, k, true},
                         v, nullptr, false);
    SWAPFFN_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    return download(dh, size_t(small) * n);  // the rows every run has
  };
  for (int split : {1, 2, 4}) {
    std::vector<GemmVariant> same;
    for (const auto& v : down_gemm_variants())
      if (v.split_k == split) same.push_back(v);
    ASSERT_GE(same.size(), 2u) << "split " << split << ": nothing to compare";
    const auto ref = run(same[0], small);
    for (const auto& v : same)
      for (int m : {small, big})
        EXPECT_EQ(0, std::memcmp(ref.data(), run(v, m).data(), ref.size() * 4))
            << v.name() << " at M = " << m << " differs from " << same[0].name() << " at M = " << small;
    if (split != 1) continue;
    for (const auto& name : cutlass_down_variants())
      for (int m : {small, big}) {
        dh.upload(h0);
        launch_cutlass_gemm_residual({reinterpret_cast<const __nv_bfloat16*>(da.get()),
                                      reinterpret_cast<const __nv_bfloat16*>(dw.get()), dh.get(), m, n, k, true},
                                     name, nullptr, false);
        SWAPFFN_CHECK_LAUNCH();
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(0, std::memcmp(ref.data(), download(dh, size_t(small) * n).data(), ref.size() * 4))
            << "CUTLASS " << name << " at M = " << m << " differs from " << same[0].name() << " at M = " << small;
      }
  }
}

// Poisons `out` (every byte 0x7F), runs one diagnostic half and checks that it did only its half:
// operands_only never writes the output (no epilogue), mma_only writes all of it (the epilogue runs)
// without any load. "Written" is any bit pattern but the poison, which garbage matches by chance in
// at most a few elements.
template <class T, class Launch>
void expect_only_the_mma_half_writes(DeviceBuffer<T>& out, GemmFeed feed, const std::string& what, Launch&& launch) {
  CUDA_CHECK(cudaMemset(out.get(), 0x7F, out.size() * sizeof(T)));
  launch();
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<T> got = download(out, out.size());
  unsigned char poison[sizeof(T)];
  std::memset(poison, 0x7F, sizeof(T));
  size_t written = 0;
  for (const T& x : got) written += std::memcmp(&x, poison, sizeof(T)) != 0;
  if (feed == GemmFeed::operands_only)
    EXPECT_EQ(written, 0u) << what << ": operands_only wrote the output";
  else
    EXPECT_GE(written, got.size() * 99 / 100) << what << ": mma_only left " << got.size() - written << " of "
                                              << got.size() << " elements unwritten";
}

// The diagnostic halves of the default GEMMs (GemmFeed, timed by `swapffn tune`) must run to the
// end for the row counts of B = 1 and a partial tile, and do only their half. Their values are not
// meaningful and are not checked.
TEST(GemmFeed, EachHalfRunsAndOnlyTheMmaHalfWrites) {
  SKIP_WITHOUT_HOPPER();
  constexpr int f = 1024, k = 256;
  for (const int m : {512, 200}) {
    std::mt19937_64 rng(77 + m);
    DeviceBuffer<bf16> da, dw, du(size_t(m) * f), dw2;
    da.upload(random_bf16(size_t(m) * k, rng, 1.f));
    dw.upload(random_bf16(size_t(2) * f * k, rng, 0.05f));
    dw2.upload(random_bf16(size_t(k) * f, rng, 0.05f));
    DeviceBuffer<float> dh(size_t(m) * k);
    const auto nv = [](DeviceBuffer<bf16>& b) { return reinterpret_cast<__nv_bfloat16*>(b.get()); };
    for (const auto feed : {GemmFeed::operands_only, GemmFeed::mma_only}) {
      for (const auto& v : dual_gemm_feed_variants())
        expect_only_the_mma_half_writes(du, feed, "dual " + v.name() + " M " + std::to_string(m), [&] {
          launch_dual_gemm_swiglu_feed({nv(da), nv(dw), nv(du), m, 2 * f, k}, v, feed, nullptr);
        });
      // Residual off (a plain store): a reduce-add of the zeros fresh stage buffers may hold would
      // leave h as it was.
      for (const auto& v : down_gemm_feed_variants())
        expect_only_the_mma_half_writes(dh, feed, "down " + v.name() + " M " + std::to_string(m), [&] {
          launch_gemm_residual_feed({nv(du), nv(dw2), dh.get(), m, k, f, false}, v, feed, nullptr);
        });
    }
  }
  EXPECT_THROW(launch_dual_gemm_swiglu_feed({nullptr, nullptr, nullptr, 512, 2048, 256}, GemmVariant{128, 6, 1, 2},
                                            GemmFeed::operands_only, nullptr),
               Error);
}

}  // namespace
}  // namespace swapffn::cuda
