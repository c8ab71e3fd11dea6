// The engines' device face (swapffn/device_steps.hpp): engines and pools on their own device whatever
// device is current, the caller's current device restored by every entry point, and two engines
// with their pools interleaved in one process giving bitwise each one's results alone.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cuda/runtime/device_buffer.hpp"
#include "cuda/runtime/owned_handles.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/device.hpp"
#include "swapffn/device_steps.hpp"

namespace swapffn {
namespace {

int current() {
  int d = -1;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

int device_count() {
  int n = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n));
  return n;
}

// T slot steps of rows `ids` through the device face on `stream`, deltas [T, B, D] downloaded.
std::vector<float> device_steps(DeviceSteps& g, StatePool& pool, const std::vector<int32_t>& ids,
                                const std::vector<float>& x, int64_t tokens, cudaStream_t stream) {
  const int64_t B = int64_t(ids.size()), n = int64_t(x.size()) / tokens;
  cuda::DeviceBuffer<float> xd, dd(x.size());
  xd.upload(x);
  cuda::DeviceBuffer<int32_t> idd;
  idd.upload(ids);
  CUDA_CHECK(cudaMemsetAsync(dd.get(), 0xFF, x.size() * sizeof(float), stream));
  for (int64_t t = 0; t < tokens; ++t)
    g.enqueue_step_slots(xd.get() + t * n, idd.get(), B, dd.get() + t * n, pool, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> out(x.size());
  CUDA_CHECK(cudaMemcpy(out.data(), dd.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

TEST(DeviceFace, GpuEnginesHaveOneAndTheReferenceNone) {
  const Weights& w = gpu_test::weights_of("tiny");
  for (const char* b : {"fused", "unfused", "fused-fp8"}) {
    auto e = make_engine(b, w);
    ASSERT_NE(e->device_steps(), nullptr) << b;
    EXPECT_EQ(e->device_steps()->device(), current()) << b;
  }
  EXPECT_EQ(make_engine("reference", w)->device_steps(), nullptr);
}

// Two engines (two backends) and their pools, their steps interleaved token by token on one
// stream: each gets bitwise what it gets alone.
TEST(DeviceFace, TwoEnginesInterleavedEqualEachAlone) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t T = 4, D = w.cfg.d_model;
  const std::vector<int32_t> ids_a = {2, kPaddingSlot, 0}, ids_b = {1, 3};
  const std::vector<float> xa = decode_inputs(71, T, int64_t(ids_a.size()), D);
  const std::vector<float> xb = decode_inputs(72, T, int64_t(ids_b.size()), D);
  cuda::OwnedStream s;

  std::vector<float> alone_a, alone_b;
  {
    auto a = make_engine("fused", w), b = make_engine("fused-fp8", w);
    auto pa = a->make_pool(4), pb = b->make_pool(4);
    alone_a = device_steps(*a->device_steps(), *pa, ids_a, xa, T, s.s);
    alone_b = device_steps(*b->device_steps(), *pb, ids_b, xb, T, s.s);
  }
  auto a = make_engine("fused", w), b = make_engine("fused-fp8", w);
  auto pa = a->make_pool(4), pb = b->make_pool(4);
  const int64_t na = D * int64_t(ids_a.size()), nb = D * int64_t(ids_b.size());
  std::vector<float> got_a, got_b;
  for (int64_t t = 0; t < T; ++t) {  // one token each, in turn, with their pools
    const std::vector<float> ya = device_steps(*a->device_steps(), *pa, ids_a,
                                               std::vector<float>(xa.begin() + t * na, xa.begin() + (t + 1) * na), 1, s.s);
    const std::vector<float> yb = device_steps(*b->device_steps(), *pb, ids_b,
                                               std::vector<float>(xb.begin() + t * nb, xb.begin() + (t + 1) * nb), 1, s.s);
    got_a.insert(got_a.end(), ya.begin(), ya.end());
    got_b.insert(got_b.end(), yb.begin(), yb.end());
  }
  ASSERT_EQ(got_a.size(), alone_a.size());
  EXPECT_EQ(0, std::memcmp(got_a.data(), alone_a.data(), got_a.size() * sizeof(float)));
  ASSERT_EQ(got_b.size(), alone_b.size());
  EXPECT_EQ(0, std::memcmp(got_b.data(), alone_b.data(), got_b.size() * sizeof(float)));
}

// The per-row buffers are sized again at another batch size only, and the count says so: what a
// caller checks before replaying a graph it captured.
TEST(DeviceFace, BuffersGenerationCountsEachSizing) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model;
  auto e = make_engine("fused", w);
  auto pool = e->make_pool(4);
  DeviceSteps& g = *e->device_steps();
  cuda::OwnedStream s;
  const uint64_t g0 = g.buffers_generation();
  device_steps(g, *pool, {0, 1}, decode_inputs(74, 2, 2, D), 2, s.s);
  const uint64_t g2 = g.buffers_generation();
  EXPECT_EQ(g2, g0 + 1);
  device_steps(g, *pool, {1, 0}, decode_inputs(75, 3, 2, D), 3, s.s);
  EXPECT_EQ(g.buffers_generation(), g2);  // the same batch size: the same buffers
  device_steps(g, *pool, {3}, decode_inputs(76, 1, 1, D), 1, s.s);
  EXPECT_EQ(g.buffers_generation(), g2 + 1);
}

// A caller's graph captured at B = 2 stays valid after a step at B = 1 sized new buffers: its
// replay gives a twin engine's eager B = 2 steps, bit for bit, and the B = 1 steps between
// replays are unaffected.
TEST(DeviceFace, CapturedGraphsOutliveASizingForAnotherBatch) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model, T = 3;
  const std::vector<int32_t> ids2 = {0, 2}, ids1 = {3};
  const std::vector<float> x2 = decode_inputs(77, T + 1, 2, D), x1 = decode_inputs(78, T, 1, D);

  auto twin = make_engine("fused", w);
  auto twin_pool = twin->make_pool(4);
  cuda::OwnedStream s;
  const std::vector<float> want2 = device_steps(*twin->device_steps(), *twin_pool, ids2, x2, T + 1, s.s);
  auto twin1 = make_engine("fused", w);
  auto twin1_pool = twin1->make_pool(4);
  const std::vector<float> want1 = device_steps(*twin1->device_steps(), *twin1_pool, ids1, x1, T, s.s);

  auto e = make_engine("fused", w);
  auto pool = e->make_pool(4);
  DeviceSteps& g = *e->device_steps();
  const int64_t n2 = 2 * D;
  cuda::DeviceBuffer<float> x2d, d2(x2.size()), xin(static_cast<size_t>(n2)), dout(static_cast<size_t>(n2)), x1d,
      d1(x1.size());
  x2d.upload(x2);
  x1d.upload(x1);
  cuda::DeviceBuffer<int32_t> id2, id1;
  id2.upload(ids2);
  id1.upload(ids1);
  g.enqueue_step_slots(x2d.get(), id2.get(), 2, d2.get(), *pool, s.s);  // eager: sizes for B = 2
  CUDA_CHECK(cudaMemcpyAsync(xin.get(), x2d.get() + n2, size_t(n2) * sizeof(float), cudaMemcpyDeviceToDevice, s.s));
  CUDA_CHECK(cudaStreamSynchronize(s.s));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  g.enqueue_step_slots(xin.get(), id2.get(), 2, dout.get(), *pool, s.s);
  CUDA_CHECK(cudaStreamEndCapture(s.s, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int64_t t = 1; t <= T; ++t) {
    g.enqueue_step_slots(x1d.get() + (t - 1) * D, id1.get(), 1, d1.get() + (t - 1) * D, *pool, s.s);  // B = 1
    CUDA_CHECK(cudaMemcpyAsync(xin.get(), x2d.get() + t * n2, size_t(n2) * sizeof(float), cudaMemcpyDeviceToDevice,
                               s.s));
    CUDA_CHECK(cudaGraphLaunch(exec, s.s));
    CUDA_CHECK(cudaMemcpyAsync(d2.get() + t * n2, dout.get(), size_t(n2) * sizeof(float), cudaMemcpyDeviceToDevice,
                               s.s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s.s));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  std::vector<float> got2(x2.size()), got1(x1.size());
  CUDA_CHECK(cudaMemcpy(got2.data(), d2.get(), got2.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got1.data(), d1.get(), got1.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(got2.data(), want2.data(), got2.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(got1.data(), want1.data(), got1.size() * sizeof(float)));
}

// Every entry point leaves the caller's current device as it found it; with a second GPU current,
// an engine made on device 0 still runs there and gives the same bits.
TEST(DeviceFace, EntryPointsRestoreTheCurrentDevice) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model;
  const std::vector<float> x = decode_inputs(73, 2, 2, D);
  CUDA_CHECK(cudaSetDevice(0));
  auto e = make_engine("fused", w);
  auto pool = e->make_pool(2);
  cuda::OwnedStream s;
  const std::vector<float> want = device_steps(*e->device_steps(), *pool, {0, 1}, x, 2, s.s);
  if (device_count() < 2) {
    EXPECT_EQ(current(), 0);
    std::vector<float> d(x.size() / 2);
    e->step_slots(x.data(), {0, 1}, d.data(), *pool);
    pool->reset({0});
    EXPECT_EQ(current(), 0);
    GTEST_SKIP() << "one GPU: another current device cannot be shown";
  }
  // Device 0's arrays and stream, made there; the engine is then used with device 1 current.
  auto fresh = make_engine("fused", w);
  auto fresh_pool = fresh->make_pool(2);
  const std::vector<int32_t> ids = {0, 1};
  cuda::DeviceBuffer<float> xd, dd(x.size());
  xd.upload(x);
  cuda::DeviceBuffer<int32_t> idd;
  idd.upload(ids);
  CUDA_CHECK(cudaSetDevice(1));
  const int64_t n = int64_t(x.size()) / 2;
  for (int64_t t = 0; t < 2; ++t) {
    fresh->device_steps()->enqueue_step_slots(xd.get() + t * n, idd.get(), 2, dd.get() + t * n, *fresh_pool, s.s);
    EXPECT_EQ(current(), 1);
  }
  CUDA_CHECK(cudaStreamSynchronize(s.s));
  std::vector<float> got(x.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dd.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, want);
  std::vector<float> d(x.size() / 2);
  fresh->step_slots(x.data(), ids, d.data(), *fresh_pool);
  fresh_pool->reset({0});
  (void)fresh_pool->get(1);
  EXPECT_EQ(current(), 1);
  CUDA_CHECK(cudaSetDevice(0));
}

}  // namespace
}  // namespace swapffn
