// The state pool (SPEC section 7) on the GPU backends: the slot contract of state_pool_test_util.hpp
// (bitwise equal to dense steps, padding, unnamed slots untouched, refusals), a pool made by another
// engine refused, and the device entry points against the host slot step (which drops padding rows
// and runs only the named ones): the bench's loop of slot steps through the engine's graph, and the
// step on a caller's stream, eagerly and captured in the caller's CUDA graph, with padding rows and
// batch sizes that differ from the host step's (batch invariance of every GPU backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda/common/gpu_engine.hpp"
#include "gpu_backend_test_util.hpp"
#include "state_pool_test_util.hpp"

namespace swapffn {
namespace {

constexpr int32_t P = kPaddingSlot;

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

// A pool of 8 slots, every slot a different random state (so that a write to a slot no row names
// shows, padding rows included).
std::unique_ptr<StatePool> random_pool(Engine& e, uint64_t seed) {
  const Config& cfg = e.config();
  auto pool = e.make_pool(8);
  const State all = gpu_test::random_state(cfg, pool->slots(), seed);
  State one = State::init(cfg, 1);
  for (int64_t s = 0; s < pool->slots(); ++s) {
    all.copy_sequence_to(s, one, 0);
    pool->set(int32_t(s), one);
  }
  return pool;
}

std::vector<State> contents(const StatePool& pool) { return testing::pool_contents(pool); }

// Every token's rows (slot ids, padding included) and their x: [sum of B, D].
struct Tokens {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> x;
};

Tokens tokens_of(const std::vector<std::vector<int32_t>>& ids, int64_t d_model, uint64_t seed) {
  Tokens t{ids, {}};
  for (size_t k = 0; k < ids.size(); ++k)
    t.x.push_back(decode_inputs(seed + k, 1, int64_t(ids[k].size()), d_model));
  return t;
}

// The host slot steps of `t` on a fresh engine and pool: each token's delta, then the pool.
std::vector<std::vector<float>> host_slot_steps(Engine& e, StatePool& pool, const Tokens& t) {
  std::vector<std::vector<float>> out;
  for (size_t k = 0; k < t.ids.size(); ++k) {
    out.emplace_back(t.x[k].size(), std::numeric_limits<float>::quiet_NaN());
    e.step_slots(t.x[k].data(), t.ids[k], out.back().data(), pool);
  }
  return out;
}

std::vector<float> download(const float* p, size_t n) {
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

void expect_same_pools(const StatePool& got, const StatePool& want) {
  for (int64_t s = 0; s < want.slots(); ++s) EXPECT_TRUE(got.get(int32_t(s)) == want.get(int32_t(s))) << "slot " << s;
}

class GpuSlotSteps : public ::testing::TestWithParam<const char*> {};

// enqueue_decode_slots (what `bench` times: the slot step's graph replayed token after token, its
// first token eager and its second captured) gives the bits of step_slots token by token; a padding
// row gets zero delta and writes no slot.
TEST_P(GpuSlotSteps, DeviceLoopOfSlotStepsEqualsHostSlotSteps) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t T = 4, D = w.cfg.d_model;
  const std::vector<int32_t> ids = {1, P, 5, 7};
  const int64_t B = int64_t(ids.size());
  const std::vector<float> x = decode_inputs(93, 2 * T, B, D);  // two calls of T tokens

  auto host_e = make_engine(GetParam(), w);
  auto host_pool = random_pool(*host_e, 92);
  std::vector<float> want(x.size());
  for (int64_t t = 0; t < 2 * T; ++t)
    host_e->step_slots(&x[size_t(t * B * D)], ids, &want[size_t(t * B * D)], *host_pool);

  auto dev_e = make_engine(GetParam(), w);
  auto dev_pool = random_pool(*dev_e, 92);
  cuda::GpuEngine& g = *cuda::gpu_engine_of(*dev_e);
  cuda::DeviceBuffer<float> xd, dd(x.size());
  xd.upload(x);
  cuda::DeviceBuffer<int32_t> idd;
  idd.upload(ids);
  CUDA_CHECK(cudaMemset(dd.get(), 0xFF, x.size() * sizeof(float)));
  const size_t half = x.size() / 2;
  g.enqueue_decode_slots(xd.get(), dd.get(), T, *dev_pool, idd.get(), B);  // eager, capture, replays
  g.enqueue_decode_slots(xd.get() + half, dd.get() + half, T, *dev_pool, idd.get(), B);  // replays
  CUDA_CHECK(cudaStreamSynchronize(g.stream()));
  const std::vector<float> got = download(dd.get(), x.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  for (int64_t t = 0; t < 2 * T; ++t)
    for (int64_t i = 0; i < D; ++i) ASSERT_EQ(got[size_t((t * B + 1) * D + i)], 0.f) << "padding delta, token " << t;
  expect_same_pools(*dev_pool, *host_pool);
}

// The step on a caller's stream (the Python path), kernel by kernel, with padding rows and batch
// sizes unlike the host step's (the host runs the named rows only: B = 3, 3, 1, 3, 3 against 4, 6,
// 2, 3, 4 here), so the GEMMs run at other row counts: the bits must not change. Then the same
// step captured in the caller's CUDA graph and replayed.
TEST_P(GpuSlotSteps, CallerStreamStepsWithPaddingEqualHostSlotSteps) {
  const Weights& w = gpu_test::weights_of("tiny");
  const int64_t D = w.cfg.d_model;
  const Tokens t = tokens_of({{5, P, 1, 2}, {P, 2, P, P, 5, 1}, {1, P}, {2, 5, 1}, {5, P, 1, 2}}, D, 94);

  auto host_e = make_engine(GetParam(), w);
  auto host_pool = random_pool(*host_e, 95);
  const std::vector<State> before = contents(*host_pool);
  const std::vector<std::vector<float>> want = host_slot_steps(*host_e, *host_pool, t);
  for (int32_t s : {0, 3, 4, 6, 7}) ASSERT_TRUE(host_pool->get(s) == before[size_t(s)]) << "host: slot " << s;

  auto dev_e = make_engine(GetParam(), w);
  auto dev_pool = random_pool(*dev_e, 95);
  cuda::GpuEngine& g = *cuda::gpu_engine_of(*dev_e);
  cuda::OwnedStream caller;
  for (size_t k = 0; k < t.ids.size(); ++k) {
    SCOPED_TRACE("token " + std::to_string(k));
    const int64_t B = int64_t(t.ids[k].size());
    cuda::DeviceBuffer<float> xd, dd(t.x[k].size());
    xd.upload(t.x[k]);
    cuda::DeviceBuffer<int32_t> idd;
    idd.upload(t.ids[k]);
    CUDA_CHECK(cudaMemset(dd.get(), 0xFF, t.x[k].size() * sizeof(float)));
    g.enqueue_step_slots(xd.get(), idd.get(), B, dd.get(), *dev_pool, caller.s);
    CUDA_CHECK(cudaStreamSynchronize(caller.s));
    const std::vector<float> got = download(dd.get(), t.x[k].size());
    EXPECT_EQ(0, std::memcmp(got.data(), want[k].data(), got.size() * sizeof(float)));
  }
  expect_same_pools(*dev_pool, *host_pool);

  // Captured in the caller's graph once its batch size has run (on another pool), then replayed for
  // tokens 0 and 4 (B = 4): the host steps of just those two tokens.
  const Tokens two{{t.ids[0], t.ids[4]}, {t.x[0], t.x[4]}};
  auto two_e = make_engine(GetParam(), w);
  auto two_pool = random_pool(*two_e, 95);
  const std::vector<std::vector<float>> want_two = host_slot_steps(*two_e, *two_pool, two);
  auto graph_pool = random_pool(*dev_e, 95), warm_pool = random_pool(*dev_e, 96);
  const size_t n = two.x[0].size();
  cuda::DeviceBuffer<float> xd(n), dd(n);
  cuda::DeviceBuffer<int32_t> idd;
  idd.upload(two.ids[0]);
  g.enqueue_step_slots(xd.get(), idd.get(), 4, dd.get(), *warm_pool, caller.s);
  CUDA_CHECK(cudaStreamSynchronize(caller.s));
  const cuda::CapturedGraph step(caller.s,
                                 [&] { g.enqueue_step_slots(xd.get(), idd.get(), 4, dd.get(), *graph_pool, caller.s); });
  for (size_t k = 0; k < 2; ++k) {
    SCOPED_TRACE("replay " + std::to_string(k));
    CUDA_CHECK(cudaMemcpyAsync(xd.get(), two.x[k].data(), n * sizeof(float), cudaMemcpyHostToDevice, caller.s));
    CUDA_CHECK(cudaMemsetAsync(dd.get(), 0xFF, n * sizeof(float), caller.s));
    step.launch(caller.s);
    CUDA_CHECK(cudaStreamSynchronize(caller.s));
    const std::vector<float> got = download(dd.get(), n);
    EXPECT_EQ(0, std::memcmp(got.data(), want_two[k].data(), n * sizeof(float)));
  }
  expect_same_pools(*graph_pool, *two_pool);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuSlotSteps, ::testing::Values("fused", "unfused", "fused-fp8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');  // test names take no '-'
                           return n;
                         });

}  // namespace
}  // namespace swapffn
