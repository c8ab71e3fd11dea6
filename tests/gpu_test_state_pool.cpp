// The state pool (SPEC section 7) on the GPU backends: the slot contract of state_pool_test_util.hpp
// (bitwise equal to dense steps, padding, unnamed slots untouched, refusals), a pool made by another
// engine refused, and the bench's device loop of slot steps equal to the host slot steps.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/common/gpu_engine.hpp"
#include "gpu_backend_test_util.hpp"
#include "state_pool_test_util.hpp"

namespace swapffn {
namespace {

TEST(GpuStatePool, EveryGpuBackendKeepsTheSlotContract) {
  for (const char* backend : {"fused", "unfused", "fused-fp8"}) {
    SCOPED_TRACE(backend);
    auto e = make_engine(backend, gpu_test::weights_of("tiny"));
    testing::expect_pool_contract(*e, 4);
  }
}

TEST(GpuStatePool, RefusesAnotherEnginesPool) {
  const Weights& w = gpu_test::weights_of("tiny");
  auto a = make_engine("fused", w), b = make_engine("fused", w), ref = make_engine("reference", w);
  auto pool_b = b->make_pool(2), pool_ref = ref->make_pool(2);
  std::vector<float> x = decode_inputs(91, 1, 1, w.cfg.d_model), d(x.size());
  EXPECT_THROW(a->step_slots(x.data(), {0}, d.data(), *pool_b), Error);
  EXPECT_THROW(a->step_slots(x.data(), {0}, d.data(), *pool_ref), Error);
  EXPECT_THROW(ref->step_slots(x.data(), {0}, d.data(), *a->make_pool(2)), Error);
}

// enqueue_decode_slots (what `bench` times) gives the bits of step_slots token by token.
TEST(GpuStatePool, DeviceLoopOfSlotStepsEqualsHostSlotSteps) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t B = 3, T = 3, D = w.cfg.d_model;
  const State s0 = gpu_test::random_state(w.cfg, B, 92);
  const std::vector<float> x = decode_inputs(93, T, B, D);
  const std::vector<int32_t> ids = {1, 5, 9};
  const auto filled_pool = [&](Engine& e) {
    auto pool = e.make_pool(12);
    State one = State::init(w.cfg, 1);
    for (int64_t b = 0; b < B; ++b) {
      s0.copy_sequence_to(b, one, 0);
      pool->set(ids[size_t(b)], one);
    }
    return pool;
  };
  auto host_e = make_engine("fused", w);
  auto host_pool = filled_pool(*host_e);
  std::vector<float> want(x.size());
  for (int64_t t = 0; t < T; ++t) host_e->step_slots(&x[size_t(t * B * D)], ids, &want[size_t(t * B * D)], *host_pool);

  auto dev_e = make_engine("fused", w);
  auto dev_pool = filled_pool(*dev_e);
  cuda::GpuEngine& g = *cuda::gpu_engine_of(*dev_e);
  cuda::DeviceBuffer<float> xd, dd(x.size());
  xd.upload(x);
  cuda::DeviceBuffer<int32_t> idd;
  idd.upload(ids);
  CUDA_CHECK(cudaMemset(dd.get(), 0xFF, x.size() * sizeof(float)));
  g.enqueue_decode_slots(xd.get(), dd.get(), T, *dev_pool, idd.get(), B);
  CUDA_CHECK(cudaStreamSynchronize(g.stream()));
  std::vector<float> got(x.size());
  CUDA_CHECK(cudaMemcpy(got.data(), dd.get(), got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  for (int32_t s : ids) EXPECT_TRUE(dev_pool->get(s) == host_pool->get(s)) << "slot " << s;
}

}  // namespace
}  // namespace swapffn
