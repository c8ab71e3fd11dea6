#include "bench/ffn_gemm_timing.hpp"

#include <algorithm>
#include <vector>

#include "bench/cublas_ffn_gemms.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/runtime/captured_graph.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace swapffn::cuda {
namespace {

// Median over `repeats` samples of the mean time of 10 back-to-back launches, replayed from a CUDA
// graph as in the step (programmatic edges between our kernels included). Issued from the host, a
// cuBLASLt call at M = 512 took longer to issue (~9.6 us) than its kernel ran, so host-issued launches
// timed the host.
template <class F>
double median_us(F&& launch, int repeats, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) launch();  // loads modules and libraries outside the capture
  const CapturedGraph ten(stream, [&] {
    for (int i = 0; i < 10; ++i) launch();
  });
  ten.launch(stream);
  OwnedTimingEvents ev;
  std::vector<float> t;
  for (int r = 0; r < repeats; ++r) {
    CUDA_CHECK(cudaEventRecord(ev.start, stream));
    ten.launch(stream);
    CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    t.push_back(ev.elapsed_ms() * 100.f);  // ms / 10 launches -> us
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// C[m, n] = A[m, k] B[n, k]^T through cuBLAS (bf16 operands, fp32 compute), as the unfused path does.
void cublas_nt(cublasHandle_t h, const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int m, int n, int k) {
  const float one = 1.f, zero = 0.f;
  // Column-major view: C^T[n, m] = B[n, k] * A^T[k, m].
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b, CUDA_R_16BF, k, a, CUDA_R_16BF, k, &zero, c,
                            CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

std::vector<GemmTiming> time_ffn_gemms(int d_model, int d_ff, const std::vector<int>& ms, int repeats,
                                       int reference_rows) {
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const OwnedStream owned_stream;
  const cudaStream_t stream = owned_stream.s;
  cublasHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasCreate(&handle));
  const std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> owned_handle(handle, cublasDestroy);
  CUBLAS_CHECK(cublasSetStream(handle, stream));

  DeviceBuffer<__nv_bfloat16> a(size_t(max_m) * d_model), w13(size_t(2) * d_ff * d_model), w2(size_t(d_model) * d_ff),
      u(size_t(max_m) * d_ff), scratch(size_t(max_m) * 2 * d_ff);
  DeviceBuffer<float> h(size_t(max_m) * d_model);
  fill_random_bf16(a.get(), int64_t(a.size()), 1, 1.f, stream);
  fill_random_bf16(w13.get(), int64_t(w13.size()), 2, 0.03f, stream);
  fill_random_bf16(w2.get(), int64_t(w2.size()), 3, 0.015f, stream);
  fill_random_bf16(u.get(), int64_t(u.size()), 4, 0.5f, stream);
  fill_random_f32(h.get(), int64_t(h.size()), 5, 1.f, stream);

  OwnedLtHandle lt;
  constexpr size_t kWorkspace = size_t{32} << 20;
  DeviceBuffer<uint8_t> workspace(kWorkspace);
  BatchInvariantGemm pinned(lt.h, d_model, d_ff, CUDA_R_32F, true, reference_rows, kWorkspace);
  std::vector<GemmTiming> out;
  for (const int m : ms) {
    const double f1 = 2.0 * m * 2.0 * d_ff * d_model, f2 = 2.0 * m * d_model * d_ff;
    const DualGemmSwigluArgs dual{a.get(), w13.get(), u.get(), m, 2 * d_ff, d_model};
    for (const DualGemmTile tile : kDualGemmTiles) {
      const double us = median_us([&] { launch_dual_gemm_swiglu(dual, tile, stream); }, repeats, stream);
      out.push_back({"dual_swiglu", m, 2 * d_ff, d_model, to_string(tile), us, f1 / us * 1e-6});
    }
    const double us1 = median_us([&] { cublas_nt(handle, a.get(), w13.get(), scratch.get(), m, 2 * d_ff, d_model); },
                                 repeats, stream);
    out.push_back({"cublas_gate_up", m, 2 * d_ff, d_model, "-", us1, f1 / us1 * 1e-6});
    {
      // The anchor, as `bench`'s cublas-ffn-gemms row runs it (cuBLASLt's own pick with a workspace;
      // cublasGemmEx above may pick another kernel): gate and up are two such GEMMs per step.
      const CublasFfnGemms anchor(d_model, d_ff, 1, m, 9);
      using G = CublasFfnGemms::Gemm;
      const double us_gate = median_us([&] { anchor.enqueue_gemm(G::gate, stream); }, repeats, stream);
      out.push_back({"anchor_gate", m, d_ff, d_model, "-", us_gate, 0.5 * f1 / us_gate * 1e-6,
                     "gate or up (twice per FFN step): " + anchor.algorithm(G::gate)});
      const double us_down = median_us([&] { anchor.enqueue_gemm(G::down, stream); }, repeats, stream);
      out.push_back({"anchor_down", m, d_model, d_ff, "-", us_down, f2 / us_down * 1e-6,
                     "bf16 out: " + anchor.algorithm(G::down)});
    }
    pinned.set_rows(m);
    const double us3 = median_us([&] { pinned.run(m, w2.get(), u.get(), h.get(), workspace.get(), stream); }, repeats,
                                 stream);
    out.push_back({"cublas_down_pinned", m, d_model, d_ff, "-", us3, f2 / us3 * 1e-6, pinned.describe(m)});
  }
  {
    const int n = 8192;
    DeviceBuffer<__nv_bfloat16> x(size_t(n) * n), y(size_t(n) * n), z(size_t(n) * n);
    fill_random_bf16(x.get(), int64_t(x.size()), 6, 1.f, stream);
    fill_random_bf16(y.get(), int64_t(y.size()), 7, 1.f, stream);
    const double us = median_us([&] { cublas_nt(handle, x.get(), y.get(), z.get(), n, n, n); }, std::max(3, repeats / 4), stream);
    out.push_back({"cublas_peak", n, n, n, "-", us, 2.0 * n * n * n / us * 1e-6});
  }
  return out;
}

}  // namespace swapffn::cuda
