// CublasFfnGemms (src/cuda/cublas_ffn_gemms.hpp), the anchor that `bench` sets every backend
// against: one token step must compute the three products of an FFN step on the model's weights at
// the asked row count (a wrong shape or operand would make the anchor faster than what it stands
// for), and its timing must run. Checked against host products of the same bf16 operands, with the
// outputs poisoned first. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_runner.hpp"
#include "bench/cublas_ffn_gemms.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/error.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cuda {
namespace {

using gpu_test::weights_of;

std::vector<float> download_bf16(const __nv_bfloat16* p, size_t n) {
  std::vector<bf16> raw(n);
  CUDA_CHECK(cudaMemcpy(raw.data(), p, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(raw[i]);
  return out;
}

// Compares got[rows, n] with in[rows, k] w[n, k]^T computed in double: within bf16 rounding of the
// output plus fp32 accumulation, relative to the row's scale. Returns the number of bad entries.
int64_t count_mismatches(const std::vector<float>& got, const std::vector<float>& in, const std::vector<float>& w,
                         int64_t rows, int64_t n, int64_t k, const char* what) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double t = double(in[size_t(r * k + i)]) * w[size_t(c * k + i)];
        ref += t;
        mag += std::fabs(t);
      }
      const double g = got[size_t(r * n + c)];
      if (!(std::fabs(g - ref) <= 8e-3 * std::fabs(ref) + 1e-4 * mag + 1e-30)) {
        if (bad < 5) ADD_FAILURE() << what << " [" << r << ", " << c << "]: got " << g << ", expected " << ref;
        ++bad;
      }
    }
  return bad;
}

TEST(CublasFfnGemms, OneStepComputesTheThreeProductsOfAnFfnStepOnTheModelsWeights) {
  const Weights& w = weights_of("tiny");
  const Config& cfg = w.cfg;
  const int64_t rows = 2 * cfg.core_count, d = cfg.d_model, f = cfg.d_ff;
  const CublasFfnGemms g(w, rows, 7);
  EXPECT_EQ(g.rows(), rows);
  EXPECT_EQ(g.gemms_per_step(), 3 * cfg.n_events * cfg.k_ffn);
  EXPECT_NE(g.describe().find("gate/up algo="), std::string::npos) << g.describe();
  EXPECT_NE(g.describe().find("; down algo="), std::string::npos) << g.describe();

  // Poison every output (0xFFFF is a bf16 NaN); the step must overwrite all of it.
  CUDA_CHECK(cudaMemset(g.gate(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(g.up(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(g.down(), 0xFF, size_t(rows * d) * sizeof(bf16)));
  g.enqueue_step(nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<float> x = download_bf16(g.x(), size_t(rows * d));
  const std::vector<float> gate = download_bf16(g.gate(), size_t(rows * f));
  const std::vector<float> up = download_bf16(g.up(), size_t(rows * f));
  const std::vector<float> down = download_bf16(g.down(), size_t(rows * d));
  double x_sq = 0;
  for (float v : x) x_sq += double(v) * v;
  ASSERT_GT(x_sq, 0.1 * double(x.size()));  // random, not zeros
  EXPECT_EQ(count_mismatches(gate, x, widen_bf16(w.w1), rows, f, d, "gate"), 0);
  EXPECT_EQ(count_mismatches(up, x, widen_bf16(w.w3), rows, f, d, "up"), 0);
  // The down GEMM reads the gate output as u.
  EXPECT_EQ(count_mismatches(down, gate, widen_bf16(w.w2), rows, d, f, "down"), 0);
  ASSERT_NE(0, std::memcmp(gate.data(), up.data(), gate.size() * sizeof(float))) << "gate and up are one product";
}

// One GEMM alone (what `tune --gemms-only` times): only its own output is written.
TEST(CublasFfnGemms, OneGemmAloneWritesOnlyItsOutput) {
  const Weights& w = weights_of("tiny");
  const int64_t rows = 40, d = w.cfg.d_model, f = w.cfg.d_ff;
  const CublasFfnGemms g(w, rows, 3);
  CUDA_CHECK(cudaMemset(g.gate(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(g.up(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  g.enqueue_gemm(CublasFfnGemms::Gemm::up, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> x = download_bf16(g.x(), size_t(rows * d));
  EXPECT_EQ(count_mismatches(download_bf16(g.up(), size_t(rows * f)), x, widen_bf16(w.w3), rows, f, d, "up"), 0);
  for (float v : download_bf16(g.gate(), size_t(rows * f))) ASSERT_TRUE(std::isnan(v)) << "gate was written";

  // On random weights of a given shape: every output written, finite.
  const CublasFfnGemms r(256, 512, 1, 64, 4);
  EXPECT_EQ(r.gemms_per_step(), 3);
  EXPECT_NE(r.algorithm(CublasFfnGemms::Gemm::down).find("algo="), std::string::npos);
  CUDA_CHECK(cudaMemset(r.down(), 0xFF, size_t(64 * 256) * sizeof(bf16)));
  r.enqueue_gemm(CublasFfnGemms::Gemm::down, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  int64_t nonzero = 0;
  for (float v : download_bf16(r.down(), size_t(64 * 256))) {
    ASSERT_TRUE(std::isfinite(v));
    nonzero += v != 0.f;
  }
  EXPECT_GT(nonzero, 64 * 256 / 2);
}

TEST(CublasFfnGemms, RefusesAnEmptyRowCountAndMisshapenWeights) {
  try {
    CublasFfnGemms g(weights_of("tiny"), 0, 1);
    FAIL() << "0 rows accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row count must be > 0"), std::string::npos) << e.what();
  }
  Weights short_w2 = weights_of("tiny");
  short_w2.w2.pop_back();
  try {
    CublasFfnGemms g(short_w2, 40, 1);
    FAIL() << "a w2 one value short accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w2.weight"), std::string::npos) << e.what();
  }
}

TEST(CublasFfnGemms, TimingRunsAGraphOfTokenSteps) {
  const Weights& w = weights_of("tiny");
  int windows = 0;
  std::string algorithms;
  const DecodeTiming t =
      time_cublas_ffn_gemms(w, 2, 3, 1, 3, 5, TimedWindow{[&] { ++windows; }, [&] { ++windows; }}, &algorithms);
  EXPECT_GT(t.min_ms_per_step, 0.0);
  EXPECT_LE(t.min_ms_per_step, t.median_ms_per_step);
  EXPECT_LE(t.median_ms_per_step, t.max_ms_per_step);
  EXPECT_EQ(windows, 2);  // the window opened and closed once
  EXPECT_NE(algorithms.find("algo="), std::string::npos) << algorithms;
  EXPECT_THROW(time_cublas_ffn_gemms(w, 0, 3, 1, 3, 5), Error);
  EXPECT_THROW(time_cublas_ffn_gemms(w, 2, 0, 1, 3, 5), Error);
}

}  // namespace
}  // namespace swapffn::cuda
