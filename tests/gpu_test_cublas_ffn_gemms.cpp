// CublasFfnGemms (src/bench/cublas_ffn_gemms.hpp), the anchors that `bench` sets every backend
// against (bf16, and e4m3 with block scales for the fp8 backends): one token step must compute the
// three products of an FFN step on the model's weights at the asked row count (a wrong shape or
// operand would make the anchor faster than what it stands for), and its timing must run. Checked
// against host products of the same operands, with the outputs poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "swapffn/fp8.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cuda {
namespace {

using gpu_test::weights_of;

std::vector<float> download_bf16(const void* p, size_t n) {
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

template <class T>
std::vector<T> download(const void* p, size_t n) {
  std::vector<T> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The fp8 anchor (cublas-fp8-gemms): the same three products on e4m3 operands, the model's weights
// quantised by the recipe, against fp8::gemm_reference on the codes and scales it multiplies:
// relative L2 error <= 4e-3 (bf16 outputs; why: gpu_test_fp8_gemm.cpp), outputs poisoned first.
TEST(CublasFfnGemms, Fp8StepComputesTheThreeProductsOnTheRecipesWeights) {
  const Weights& w = weights_of("tiny");
  const int64_t rows = 2 * w.cfg.core_count, d = w.cfg.d_model, f = w.cfg.d_ff;
  const CublasFfnGemms g(w, rows, 7, AnchorOperands::scaled(fp8::Scaling::blocks));
  EXPECT_EQ(g.operands(), AnchorOperands::scaled(fp8::Scaling::blocks));
  EXPECT_EQ(g.gemms_per_step(), 3 * w.cfg.n_events * w.cfg.k_ffn);
  CUDA_CHECK(cudaMemset(g.gate(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(g.up(), 0xFF, size_t(rows * f) * sizeof(bf16)));
  CUDA_CHECK(cudaMemset(g.down(), 0xFF, size_t(rows * d) * sizeof(bf16)));
  g.enqueue_step(nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());

  const fp8::FfnWeights q = fp8::quantize_ffn(fp8::Scaling::blocks, w.w1, w.w3, w.w2, d, f);
  const auto x = download<uint8_t>(g.x(), size_t(rows * d)), u = download<uint8_t>(g.u(), size_t(rows * f));
  const auto xs = download<float>(g.x_scale(), size_t(rows * d / 128)), us = download<float>(g.u_scale(), size_t(rows * f / 128));
  const auto check = [&](const std::vector<float>& got, const std::vector<uint8_t>& in, const std::vector<float>& in_scale,
                         const fp8::ScaledWeight& wq, const char* what) {
    const int64_t k = wq.cols, n = wq.rows, kb = k / 128;
    double err2 = 0, ref2 = 0;
    std::vector<float> sa(static_cast<size_t>(kb)), want(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < kb; ++b) sa[size_t(b)] = in_scale[size_t(b * rows + r)];  // [k / 128, rows]
      fp8::gemm_reference(&in[size_t(r * k)], sa.data(), wq, 1, want.data());
      for (int64_t j = 0; j < n; ++j) {
        const double e = double(got[size_t(r * n + j)]) - want[size_t(j)];
        err2 += e * e;
        ref2 += double(want[size_t(j)]) * want[size_t(j)];
      }
    }
    EXPECT_GT(ref2, 0.0) << what;
    EXPECT_LE(std::sqrt(err2 / ref2), 4e-3) << what;  // NaN (an unwritten output) fails too
  };
  check(download_bf16(g.gate(), size_t(rows * f)), x, xs, q.w1, "gate");
  check(download_bf16(g.up(), size_t(rows * f)), x, xs, q.w3, "up");
  check(download_bf16(g.down(), size_t(rows * d)), u, us, q.w2, "down");

  // On random weights of a given shape: every output of the down GEMM written, finite.
  const CublasFfnGemms r(256, 512, 1, 64, 4, AnchorOperands::scaled(fp8::Scaling::blocks));
  CUDA_CHECK(cudaMemset(r.down(), 0xFF, size_t(64 * 256) * sizeof(bf16)));
  r.enqueue_gemm(CublasFfnGemms::Gemm::down, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  for (float v : download_bf16(r.down(), size_t(64 * 256))) ASSERT_TRUE(std::isfinite(v));
}

// The headroom anchors (bench --fp8-headroom): the same codes with one scale per row of the input
// and per output channel of W (e4m3_rows), or one per tensor (e4m3_tensor), against a host product
// in double of the codes times those scales: relative L2 error <= 4e-3 (bf16 outputs; the tensor
// cores' adds inside a k block, gpu_test_fp8_gemm.cpp). On the model's weights quantised in the
// rows scaling, each weight scale is its channel's (or, per tensor, the largest of them); outputs poisoned first. A scale applied to the wrong row or
// channel, or a block layout read as a vector, gives errors of order 1.
TEST(CublasFfnGemms, Fp8HeadroomAnchorsApplyOneScalePerRowAndChannelOrPerTensor) {
  const Weights& w = weights_of("tiny");
  const int64_t rows = 2 * w.cfg.core_count, d = w.cfg.d_model, f = w.cfg.d_ff;
  const fp8::FfnWeights q = fp8::quantize_ffn(fp8::Scaling::rows, w.w1, w.w3, w.w2, d, f);
  for (const AnchorOperands o : {AnchorOperands::scaled(fp8::Scaling::rows), AnchorOperands::per_tensor()}) {
    SCOPED_TRACE(anchor_operands_name(o));
    const bool per_row = o == AnchorOperands::scaled(fp8::Scaling::rows);
    const CublasFfnGemms g(w, rows, 11, o);
    EXPECT_EQ(g.operands(), o);
    CUDA_CHECK(cudaMemset(g.gate(), 0xFF, size_t(rows * f) * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(g.down(), 0xFF, size_t(rows * d) * sizeof(bf16)));
    g.enqueue_step(nullptr);
    SWAPFFN_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
    // Weight scales: the rows scaling's per channel, or their largest (of the weight).
    const auto expected_scales = [&](const fp8::ScaledWeight& wq) {
      if (per_row) return wq.scale;
      return std::vector<float>{*std::max_element(wq.scale.begin(), wq.scale.end())};
    };
    const auto check = [&](const void* got_p, const void* in_p, const float* in_scale_p, const void* w_p,
                           const float* w_scale_p, const fp8::ScaledWeight& wq, const char* what) {
      const int64_t n = wq.rows, k = wq.cols;
      const auto got = download_bf16(got_p, size_t(rows * n));
      const auto in = download<uint8_t>(in_p, size_t(rows * k));
      const auto wc = download<uint8_t>(w_p, size_t(n * k));
      const auto sx = download<float>(in_scale_p, per_row ? size_t(rows) : 1);
      const auto sw = download<float>(w_scale_p, per_row ? size_t(n) : 1);
      EXPECT_EQ(wc, wq.data) << what << ": the recipe's codes";
      EXPECT_EQ(sw, expected_scales(wq)) << what;
      double err2 = 0, ref2 = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < k; ++i)
            acc += double(fp8::e4m3_to_float(in[size_t(r * k + i)])) * fp8::e4m3_to_float(wc[size_t(j * k + i)]);
          const double want = acc * sx[per_row ? size_t(r) : 0] * sw[per_row ? size_t(j) : 0];
          const double e = double(got[size_t(r * n + j)]) - want;
          err2 += e * e;
          ref2 += want * want;
        }
      EXPECT_GT(ref2, 0.0) << what;
      EXPECT_LE(std::sqrt(err2 / ref2), 4e-3) << what;  // NaN (an unwritten output) fails too
    };
    check(g.gate(), g.x(), g.x_scale(), g.w1(), g.w1_scale(), q.w1, "gate");
    check(g.down(), g.u(), g.u_scale(), g.w2(), g.w2_scale(), q.w2, "down");
  }
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
  for (const AnchorOperands o : {AnchorOperands::scaled(fp8::Scaling::blocks), AnchorOperands::scaled(fp8::Scaling::rows), AnchorOperands::per_tensor()}) {
    std::string fp8_algorithms;
    const DecodeTiming t8 = time_cublas_ffn_gemms(w, 2, 3, 1, 3, 5, {}, &fp8_algorithms, o);
    EXPECT_GT(t8.min_ms_per_step, 0.0) << anchor_operands_name(o);
    EXPECT_NE(fp8_algorithms.find("algo="), std::string::npos) << fp8_algorithms;
  }
}

}  // namespace
}  // namespace swapffn::cuda
