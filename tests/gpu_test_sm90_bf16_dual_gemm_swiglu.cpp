// The fused backend's Hopper SwiGLU dual GEMM against a CPU computation on the same bf16 operands,
// every compiled tile, for row counts that are and are not multiples of the 128-row tile.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "gpu_backend_test_util.hpp"
#include "cuda/runtime/device_buffer.hpp"
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

double dot(const bf16* a, const bf16* b, int k) {
  double s = 0;
  for (int i = 0; i < k; ++i) s += double(bf16_to_float(a[i])) * bf16_to_float(b[i]);
  return s;
}

struct DualCase {
  int m, f, k;
  DualGemmTile v;
  float a_scale = 1.f;  // std of the activations; the gate sums have about the same std
};

class DualGemm : public ::testing::TestWithParam<DualCase> {};

TEST_P(DualGemm, MatchesCpuAndIsDeterministic) {
  const auto [m, f, k, v, a_scale] = GetParam();
  std::mt19937_64 rng(1000 + m + f + k + int(v));
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
    launch_dual_gemm_swiglu(args, v, nullptr);
    SWAPFFN_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    runs.push_back(du.download(size_t(m) * f + kGuard));
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

// Every compiled tile; M = 40 and 300 leave partial tiles (and, with multicast, a cluster whose
// second CTA has no rows at all). F = 72 (2F = 144) leaves a partial weight tile, whose outputs past
// F the store must clip.
std::vector<DualCase> dual_cases() {
  std::vector<DualCase> out;
  for (const DualGemmTile v : kDualGemmTiles) {
    out.push_back({512, 512, 256, v});
    out.push_back({40, 384, 128, v});
    out.push_back({300, 256, 192, v});
    out.push_back({200, 72, 128, v});
    out.push_back({128, 128, 64, v});  // one k-step: the first MMA (scale-d 0) is also the last
    // Gate sums of std 12: the SiLU's saturated ends (tanh = +-1, silu(g) = g or 0) and the steep
    // middle, where an error in the SiLU formula shows.
    out.push_back({256, 256, 128, v, 12.f});
    // Persistent: more tiles than SMs, and 3 k-steps per tile, so the stage ring wraps across tiles.
    if (v != DualGemmTile::bn256) out.push_back({2000, 2048, 192, v});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Variants, DualGemm, ::testing::ValuesIn(dual_cases()));

}  // namespace
}  // namespace swapffn::cuda
