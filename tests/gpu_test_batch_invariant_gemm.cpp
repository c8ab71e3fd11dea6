// BatchInvariantGemm (src/cuda/unfused/batch_invariant_gemm.hpp): a row's bits must not depend on
// how many rows share the product, although the algorithm may differ per row count (the anchor
// picked at the reference rows, or the heuristic's best at that count when it reproduced the
// anchor's bits on a probe). Checked on the default model's down GEMM (h += u W2^T, fp32 out):
// rows computed in 8192-, 1000- and 512-row products must agree bitwise. Skips without a Hopper GPU.
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

}  // namespace
}  // namespace swapffn::cuda
