// BatchInvariantGemm (src/cuda/common/batch_invariant_gemm.hpp): a row's bits must not depend on
// how many rows share the product, although the algorithm may differ per row count (the anchor
// picked at the reference rows, or the heuristic's best at that count when it reproduced the
// anchor's bits on its probes). Checked on the default model's down GEMM (h += u W2^T, fp32 out):
// rows computed in 8192-, 1000- and 512-row products must agree bitwise; and on the unfused
// backend's gate-and-up GEMM (bf16 out, where rounding hides most differences of summation order)
// at the tiny and default shapes over many row counts, on random operands and on operands whose
// products cancel in pairs (each output then the residue of its summation order). Skips without a
// Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

TEST(BatchInvariantGemm, RowBitsDoNotDependOnTheRowCountOrTheAlgorithmChosenForIt) {
  constexpr int64_t n = 1024, k = 4096, reference = 512, big = 8192;
  constexpr size_t ws_bytes = size_t{32} << 20;
  OwnedLtHandle lt;
  BatchInvariantGemm g(lt.h, n, k, CUDA_R_32F, /*accumulate=*/true, reference, ws_bytes);
  for (int64_t rows : {big, int64_t{1000}, reference}) g.set_rows(rows);
  std::printf("anchor: %s\n8192 rows: %s\n1000 rows: %s\n", g.describe().c_str(), g.describe(big).c_str(),
              g.describe(1000).c_str());

  DeviceBuffer<__nv_bfloat16> w(size_t(n * k)), x(size_t(big * k));
  DeviceBuffer<float> h0(size_t(big * n)), h_big(size_t(big * n)), h_small(size_t(big * n));
  DeviceBuffer<uint8_t> ws(ws_bytes);
  fill_random_bf16(w.get(), n * k, 11, 0.02f, nullptr);
  fill_random_bf16(x.get(), big * k, 12, 1.f, nullptr);
  fill_random_f32(h0.get(), big * n, 13, 1.f, nullptr);
  const size_t bytes = size_t(big * n) * sizeof(float);
  CUDA_CHECK(cudaMemcpy(h_big.get(), h0.get(), bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaMemcpy(h_small.get(), h0.get(), bytes, cudaMemcpyDeviceToDevice));

  g.run(big, w.get(), x.get(), h_big.get(), ws.get(), nullptr);
  // The same rows in smaller products: [0, 1000), then 512-row pieces (the last one shifted back so
  // it ends at row 8192; its overlap is recomputed from h0, so it must give the same bits again).
  g.run(1000, w.get(), x.get(), h_small.get(), ws.get(), nullptr);
  for (int64_t r0 = 1000; r0 < big; r0 += reference) {
    const int64_t start = std::min(r0, big - reference);
    CUDA_CHECK(cudaMemcpy(h_small.get() + start * n, h0.get() + start * n, size_t(reference * n) * sizeof(float),
                          cudaMemcpyDeviceToDevice));
    g.run(reference, w.get(), x.get() + start * k, h_small.get() + start * n, ws.get(), nullptr);
  }
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> a(size_t(big * n)), b(size_t(big * n)), base(size_t(big * n));
  CUDA_CHECK(cudaMemcpy(a.data(), h_big.get(), bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(b.data(), h_small.get(), bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(base.data(), h0.get(), bytes, cudaMemcpyDeviceToHost));
  ASSERT_NE(0, std::memcmp(a.data(), base.data(), bytes)) << "the product changed nothing";
  for (int64_t r = 0; r < big; ++r)
    ASSERT_EQ(0, std::memcmp(&a[size_t(r * n)], &b[size_t(r * n)], size_t(n) * sizeof(float)))
        << "row " << r << " differs between the 8192-row product and a smaller one";
  EXPECT_THROW(g.run(77, w.get(), x.get(), h_small.get(), ws.get(), nullptr), Error);  // never prepared
}

// Columns [k/2, k) of a bf16 matrix [rows, k] (bits, k even) set to columns [0, k/2), negated when
// `negate`: mirrored X against mirrored-negated W gives products that cancel in pairs.
std::vector<uint16_t> mirrored(std::vector<uint16_t> m, int64_t rows, int64_t k, bool negate) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k / 2; ++j) {
      const uint16_t v = m[size_t(r * k + j)];
      m[size_t(r * k + k / 2 + j)] = negate ? uint16_t(v ^ 0x8000u) : v;
    }
  return m;
}

std::vector<uint16_t> bits_of(const DeviceBuffer<__nv_bfloat16>& b) {
  std::vector<uint16_t> h(b.size());
  CUDA_CHECK(cudaMemcpy(h.data(), b.get(), h.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  return h;
}

TEST(BatchInvariantGemm, Bf16OutputRowBitsDoNotDependOnTheRowCount) {
  constexpr size_t ws_bytes = size_t{32} << 20;
  struct Shape {
    int64_t n, k, reference;  // the unfused gate-and-up GEMM: n = 2 F, k = D, reference = C rows
  };
  for (const Shape sh : {Shape{768, 128, 40}, Shape{8192, 1024, 512}}) {
    SCOPED_TRACE("n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k));
    std::vector<int64_t> counts;
    for (int64_t m : {1, 2, 3, 4, 5, 6, 9, 16}) counts.push_back(m * sh.reference);
    const int64_t big = counts.back(), n = sh.n, k = sh.k;
    OwnedLtHandle lt;
    BatchInvariantGemm g(lt.h, n, k, CUDA_R_16BF, /*accumulate=*/false, sh.reference, ws_bytes);
    for (int64_t rows : counts) {
      g.set_rows(rows);
      std::printf("%lld rows: %s\n", static_cast<long long>(rows), g.describe(rows).c_str());
    }
    DeviceBuffer<__nv_bfloat16> w(size_t(n * k)), x(size_t(big * k)), out(size_t(big * n));
    DeviceBuffer<uint8_t> ws(ws_bytes);
    fill_random_bf16(w.get(), n * k, 21, 0.05f, nullptr);
    fill_random_bf16(x.get(), big * k, 22, 1.f, nullptr);
    for (const bool cancelling : {false, true}) {
      SCOPED_TRACE(cancelling ? "cancelling operands" : "random operands");
      if (cancelling) {
        w.upload(reinterpret_cast<const __nv_bfloat16*>(mirrored(bits_of(w), n, k, true).data()), w.size());
        x.upload(reinterpret_cast<const __nv_bfloat16*>(mirrored(bits_of(x), big, k, false).data()), x.size());
      }
      std::vector<uint16_t> whole;
      for (auto it = counts.rbegin(); it != counts.rend(); ++it) {  // the largest product first
        const int64_t rows = *it;
        CUDA_CHECK(cudaMemset(out.get(), 0xFF, out.size() * sizeof(__nv_bfloat16)));
        g.run(rows, w.get(), x.get(), out.get(), ws.get(), nullptr);
        SWAPFFN_CHECK_LAUNCH();
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> got = bits_of(out);
        if (whole.empty()) {
          whole = got;
          if (cancelling) {  // residues left in the outputs, or this half of the test sees nothing
            size_t nonzero = 0;
            for (size_t i = 0; i < size_t(big * n); ++i) nonzero += (whole[i] & 0x7FFFu) != 0;
            EXPECT_GT(nonzero, size_t(big * n) / 100) << "the cancelling products left (almost) no residues";
          }
          continue;
        }
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(0, std::memcmp(&got[size_t(r * n)], &whole[size_t(r * n)], size_t(n) * sizeof(uint16_t)))
              << "row " << r << " differs between the " << big << "-row product and the " << rows << "-row one";
      }
    }
  }
}

}  // namespace
}  // namespace swapffn::cuda
