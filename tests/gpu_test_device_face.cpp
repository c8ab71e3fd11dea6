// The engines' device face (swapffn/device_steps.hpp): engines and pools on their own device whatever
// device is current, the caller's current device restored by every entry point, and two engines
// with their pools interleaved in one process giving bitwise each one's results alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
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

// The per-row buffers move only when a batch larger than any before needs more room, and the count
// says so: what a caller checks before replaying a graph it captured.
TEST(DeviceFace, BuffersGenerationCountsEachMove) {
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
  EXPECT_EQ(g.buffers_generation(), g2);  // a smaller batch runs in the same buffers
  device_steps(g, *pool, {3, 2, 1}, decode_inputs(77, 1, 3, D), 1, s.s);
  EXPECT_EQ(g.buffers_generation(), g2 + 1);  // a larger one moves them
}

// A caller's graph of a slot step at B = 2, replayed after eager steps at B = 1 between, gives
// bitwise the deltas and slots of the same steps run eagerly in the same order.
TEST(DeviceFace, CapturedStepStaysValidAcrossSmallerBatches) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model, T = 3;
  const std::vector<int32_t> pair = {2, 0}, one = {3};
  const std::vector<float> x2 = decode_inputs(81, T, 2, D), x1 = decode_inputs(82, T, 1, D);
  const auto token = [D](const std::vector<float>& x, int64_t t, int64_t b) {
    return std::vector<float>(x.begin() + t * b * D, x.begin() + (t + 1) * b * D);
  };
  cuda::OwnedStream s;

  std::vector<float> want2, want1, got2, got1;
  auto e0 = make_engine("fused", w);
  auto p0 = e0->make_pool(4);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> y2 = device_steps(*e0->device_steps(), *p0, pair, token(x2, t, 2), 1, s.s);
    const std::vector<float> y1 = device_steps(*e0->device_steps(), *p0, one, token(x1, t, 1), 1, s.s);
    want2.insert(want2.end(), y2.begin(), y2.end());
    want1.insert(want1.end(), y1.begin(), y1.end());
  }

  auto e = make_engine("fused", w);
  auto pool = e->make_pool(4);
  DeviceSteps& g = *e->device_steps();
  // Token 0 eagerly at both sizes (the first step at a size must run outside a capture).
  got2 = device_steps(g, *pool, pair, token(x2, 0, 2), 1, s.s);
  got1 = device_steps(g, *pool, one, token(x1, 0, 1), 1, s.s);
  const uint64_t generation = g.buffers_generation();
  cuda::DeviceBuffer<float> xg(size_t(2 * D)), dg(size_t(2 * D));
  cuda::DeviceBuffer<int32_t> ids;
  ids.upload(pair);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
  g.enqueue_step_slots(xg.get(), ids.get(), 2, dg.get(), *pool, s.s);
  CUDA_CHECK(cudaStreamEndCapture(s.s, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int64_t t = 1; t < T; ++t) {
    const std::vector<float> xt = token(x2, t, 2);
    CUDA_CHECK(cudaMemcpy(xg.get(), xt.data(), xt.size() * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dg.get(), 0xFF, xt.size() * sizeof(float)));
    CUDA_CHECK(cudaGraphLaunch(exec, s.s));
    CUDA_CHECK(cudaStreamSynchronize(s.s));
    const std::vector<float> y2 = dg.download();
    got2.insert(got2.end(), y2.begin(), y2.end());
    const std::vector<float> y1 = device_steps(g, *pool, one, token(x1, t, 1), 1, s.s);
    got1.insert(got1.end(), y1.begin(), y1.end());
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_EQ(g.buffers_generation(), generation);
  ASSERT_EQ(got2.size(), want2.size());
  EXPECT_EQ(0, std::memcmp(got2.data(), want2.data(), got2.size() * sizeof(float)));
  ASSERT_EQ(got1.size(), want1.size());
  EXPECT_EQ(0, std::memcmp(got1.data(), want1.data(), got1.size() * sizeof(float)));
  for (int32_t slot = 0; slot < 4; ++slot) EXPECT_TRUE(p0->get(slot) == pool->get(slot)) << "slot " << slot;

  // A capture at a batch size that has not run outside one is refused, recording nothing and leaving
  // the engine's buffers where they were: larger than any so far (the buffers would grow) or smaller
  // (cuBLASLt's algorithm choice and the first launches would be recorded).
  const std::vector<int32_t> four = {0, 1, 2, 3};
  cuda::DeviceBuffer<float> x4(size_t(4 * D)), d4(size_t(4 * D));
  const auto refused_capture = [&](int64_t batch) {
    const std::vector<int32_t> first(four.begin(), four.begin() + batch);
    ids.upload(first);
    CUDA_CHECK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal));
    try {
      g.enqueue_step_slots(x4.get(), ids.get(), batch, d4.get(), *pool, s.s);
      ADD_FAILURE() << "a capture at batch " << batch << ", never run outside one, was accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("outside the capture first"), std::string::npos) << err.what();
    }
    CUDA_CHECK(cudaStreamEndCapture(s.s, &graph));
    CUDA_CHECK(cudaGraphDestroy(graph));
  };
  refused_capture(3);
  EXPECT_EQ(g.buffers_generation(), generation);
  const std::vector<float> y4 = device_steps(g, *pool, four, decode_inputs(83, 1, 4, D), 1, s.s);
  for (float v : y4) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(g.buffers_generation(), generation + 1);
  refused_capture(3);
  EXPECT_EQ(g.buffers_generation(), generation + 1);
}

// The engine keeps its own graphs for at most 16 batch sizes: decode steps at 18 sizes and then the
// first again (its graph evicted, captured anew) give bitwise what an engine given the same calls one
// size at a time, each size on a fresh engine with the same slot state, gives.
TEST(DeviceFace, GraphCacheEvictsBeyondSixteenBatchSizes) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model, T = 3, kSizes = 18;
  cuda::OwnedStream s;
  const auto decode = [&](Engine& e, StatePool& pool, int64_t b, uint64_t seed) {
    std::vector<int32_t> ids(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) ids[size_t(i)] = int32_t(i);
    const std::vector<float> x = decode_inputs(seed, T, b, D);
    cuda::DeviceBuffer<float> xd, dd(x.size());
    xd.upload(x);
    cuda::DeviceBuffer<int32_t> idd;
    idd.upload(ids);
    e.device_steps()->enqueue_decode_slots(xd.get(), dd.get(), T, pool, idd.get(), b, s.s);
    CUDA_CHECK(cudaStreamSynchronize(s.s));
    return dd.download();
  };
  auto e = make_engine("fused", w);
  auto pool = e->make_pool(kSizes);
  std::vector<std::vector<float>> got;
  for (int64_t b = 1; b <= kSizes; ++b) got.push_back(decode(*e, *pool, b, 90 + uint64_t(b)));
  got.push_back(decode(*e, *pool, 1, 200));
  // The same calls, each on a fresh engine whose pool starts from the slots as they were.
  auto ref_pool_src = make_engine("fused", w);
  auto slots = ref_pool_src->make_pool(kSizes);
  for (int64_t call = 0; call <= kSizes; ++call) {
    const int64_t b = call < kSizes ? call + 1 : 1;
    auto fresh = make_engine("fused", w);
    auto p = fresh->make_pool(kSizes);
    for (int32_t i = 0; i < int32_t(kSizes); ++i) p->set(i, slots->get(i));
    const std::vector<float> want = decode(*fresh, *p, b, call < kSizes ? 90 + uint64_t(b) : 200);
    for (int32_t i = 0; i < int32_t(kSizes); ++i) slots->set(i, p->get(i));
    ASSERT_EQ(got[size_t(call)].size(), want.size()) << "call " << call;
    EXPECT_EQ(0, std::memcmp(got[size_t(call)].data(), want.data(), want.size() * sizeof(float))) << "call " << call;
  }
  for (int32_t i = 0; i < int32_t(kSizes); ++i) EXPECT_TRUE(slots->get(i) == pool->get(i)) << "slot " << i;
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
