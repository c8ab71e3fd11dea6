// The graph edge rewrite (src/cuda/graph_edges.hpp): in a captured cuBLASLt GEMM followed by one of
// our kernels launched with programmatic dependent launch, the edge between them is rewritten to
// leave from the GEMM's launch-completion port, an edge between two of our kernels is not, and the
// graph still gives the eager sequence's bits: our kernel's wait must still cover the whole GEMM.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cstring>
#include <utility>
#include <vector>

#include "cuda/device_buffer.hpp"
#include "cuda/gpu_engine.hpp"
#include "cuda/graph_edges.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/unfused/batch_invariant_gemm.hpp"
#include "gpu_backend_test_util.hpp"

namespace swapffn::cuda {
namespace {

TEST(GraphEdges, OurKernelAfterALibraryKernelStartsAtItsLaunchCompletionAndReadsItsResult) {
  SKIP_WITHOUT_HOPPER();
  constexpr int64_t rows = 512, n = 1024, k = 4096;
  constexpr size_t ws_bytes = size_t{32} << 20;
  OwnedLtHandle lt;
  OwnedStream stream;
  BatchInvariantGemm gemm(lt.h, n, k, CUDA_R_32F, /*accumulate=*/true, rows, ws_bytes);
  DeviceBuffer<__nv_bfloat16> w(size_t(n * k)), x(size_t(rows * k)), out(size_t(rows * n)), out2(size_t(rows * n));
  DeviceBuffer<float> h0(size_t(rows * n)), h(size_t(rows * n)), gain(static_cast<size_t>(n));
  DeviceBuffer<uint8_t> ws(ws_bytes);
  fill_random_bf16(w.get(), n * k, 21, 0.02f, nullptr);
  fill_random_bf16(x.get(), rows * k, 22, 1.f, nullptr);
  fill_random_f32(h0.get(), rows * n, 23, 1.f, nullptr);
  fill_random_f32(gain.get(), n, 24, 1.f, nullptr);
  const size_t h_bytes = size_t(rows * n) * sizeof(float), out_bytes = size_t(rows * n) * sizeof(__nv_bfloat16);
  // h += x W^T (cuBLASLt), then out = rmsnorm(h) and out2 = rmsnorm(h) (ours, both with PDL).
  const auto step = [&] {
    gemm.run(w.get(), x.get(), h.get(), ws.get(), stream.s);
    launch_rmsnorm_bf16(h.get(), gain.get(), out.get(), rows, n, 1e-6f, stream.s, true);
    launch_rmsnorm_bf16(h.get(), gain.get(), out2.get(), rows, n, 1e-6f, stream.s, true);
  };
  const auto run = [&](auto&& go) {
    CUDA_CHECK(cudaMemcpyAsync(h.get(), h0.get(), h_bytes, cudaMemcpyDeviceToDevice, stream.s));
    CUDA_CHECK(cudaMemsetAsync(out.get(), 0xFF, out_bytes, stream.s));  // poison: NaN in bf16
    CUDA_CHECK(cudaMemsetAsync(out2.get(), 0xFF, out_bytes, stream.s));
    go();
    CUDA_CHECK(cudaStreamSynchronize(stream.s));
    std::vector<__nv_bfloat16> a(size_t(rows * n)), b(size_t(rows * n));
    CUDA_CHECK(cudaMemcpy(a.data(), out.get(), out_bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), out2.get(), out_bytes, cudaMemcpyDeviceToHost));
    return std::pair{a, b};
  };
  const auto eager = run(step);

  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  step();
  CUDA_CHECK(cudaStreamEndCapture(stream.s, &g));
  EXPECT_EQ(launch_after_library_kernels_begin(g), 1) << "one edge leaves the library kernel";
  size_t edges = 0;
  CUDA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  CUDA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &edges));
  int early = 0, programmatic = 0;
  for (const auto& e : data) {
    early += e.from_port == cudaGraphKernelNodePortLaunchCompletion;
    programmatic += e.from_port == cudaGraphKernelNodePortProgrammatic;
  }
  EXPECT_EQ(early, 1);
  EXPECT_EQ(programmatic, 1) << "the edge between our two kernels stays as captured";
  EXPECT_EQ(launch_after_library_kernels_begin(g), 0) << "nothing left to rewrite";
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  CUDA_CHECK(inst);
  for (int rep = 0; rep < 3; ++rep) {
    const auto graphed = run([&] { CUDA_CHECK(cudaGraphLaunch(exec, stream.s)); });
    EXPECT_EQ(0, std::memcmp(graphed.first.data(), eager.first.data(), out_bytes)) << "run " << rep;
    EXPECT_EQ(0, std::memcmp(graphed.second.data(), eager.second.data(), out_bytes)) << "run " << rep;
  }
  cudaGraphExecDestroy(exec);
  // The eager output is the norm of the product, not of h0 (the GEMM changed h).
  std::vector<float> hv(size_t(rows * n)), h0v(size_t(rows * n));
  CUDA_CHECK(cudaMemcpy(hv.data(), h.get(), h_bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(h0v.data(), h0.get(), h_bytes, cudaMemcpyDeviceToHost));
  EXPECT_NE(0, std::memcmp(hv.data(), h0v.data(), h_bytes));
}

}  // namespace
}  // namespace swapffn::cuda
