// Faults on the GPU path, for every GPU backend: a batch whose buffers do not fit in the GPU's free
// memory is refused with an error naming the allocation and its size; the host state, delta and
// the trace (or a state pool's slots) are left as they were, the memory the attempt took is given
// back, and the next call (host or device-resident) either refuses cleanly or gives the bits of a
// fresh engine.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/common/gpu_engine.hpp"
#include "gpu_backend_test_util.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"

namespace swapffn {
namespace {

using gpu_test::decode;
using gpu_test::expect_bitwise_equal;
using gpu_test::random_state;
using gpu_test::weights_of;

size_t free_device_bytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return free;
}

// Holds all but about `left` bytes of the GPU's free memory until it goes out of scope.
class MemoryHog {
 public:
  explicit MemoryHog(size_t left) {
    size_t chunk = size_t{1} << 30;
    for (size_t free = free_device_bytes(); free > left + (size_t{2} << 20);) {
      void* p = nullptr;
      const size_t want = std::min(chunk, free - left);
      if (cudaMalloc(&p, want) == cudaSuccess) {
        blocks_.push_back(p);
        free = free_device_bytes();
      } else {
        cudaGetLastError();  // an expected refusal: no later check may see it
        if (chunk <= (size_t{2} << 20)) break;
        chunk /= 2;
      }
    }
  }
  ~MemoryHog() {
    for (void* p : blocks_) cudaFree(p);
  }
  MemoryHog(const MemoryHog&) = delete;
  MemoryHog& operator=(const MemoryHog&) = delete;

 private:
  std::vector<void*> blocks_;
};

constexpr size_t kLeft = size_t{256} << 20;  // free memory under the hog
// Tiny config: ~40 KB of RAM banks and ~20 KB of h per sequence on the device, so 8192 sequences
// need far more than kLeft, while their host state (335 MB) is cheap.
constexpr int64_t kHugeBatch = 8192;

bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

class GpuFaults : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuFaults, BatchBeyondFreeMemoryIsRefusedAndTheNextStepGivesFreshBits) {
  const std::string backend = GetParam();
  const Weights& w = weights_of("tiny");
  const int64_t B = 3, D = w.cfg.d_model;
  auto e = make_engine(backend, w);
  const State small = random_state(w.cfg, B, 41);
  const std::vector<float> x = decode_inputs(42, 2, B, D);
  decode(*e, x, 2, small);  // a captured graph and sized buffers before the fault

  {
    MemoryHog hog(kLeft);
    State huge = random_state(w.cfg, kHugeBatch, 43);
    const State huge_before = huge;
    const std::vector<float> xh = decode_inputs(44, 1, kHugeBatch, D);
    std::vector<float> delta(xh.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<Trace> record(1);
    record[0].resize(1, 1, 1);
    const std::vector<Trace> record_before = record;
    const size_t free_before = free_device_bytes();
    std::string msg;
    try {
      e->decode(xh.data(), delta.data(), 1, huge, &record);
    } catch (const Error& err) {
      msg = err.what();
    }
    ASSERT_FALSE(msg.empty()) << "a batch of " << kHugeBatch << " ran in " << free_before << " free bytes";
    EXPECT_EQ(msg.rfind(backend + ": batch " + std::to_string(kHugeBatch) + " does not fit in the GPU's memory: "
                                                                          "cannot allocate ",
                        0),
              0u)
        << msg;
    for (const char* part : {" bytes = ", " free of "}) EXPECT_NE(msg.find(part), std::string::npos) << msg;
    EXPECT_EQ(msg.find("src/"), std::string::npos) << "a user error carries no source location: " << msg;
    EXPECT_TRUE(huge == huge_before);
    EXPECT_TRUE(all_nan(delta));
    EXPECT_TRUE(record == record_before);
    // What the refused batch took is given back (allocation granularity aside).
    EXPECT_GE(free_device_bytes() + (size_t{8} << 20), free_before);

    // Still under the hog, a second try refuses the same way rather than running half-sized.
    EXPECT_THROW(e->decode(xh.data(), delta.data(), 1, huge, nullptr), Error);
    EXPECT_TRUE(huge == huge_before);
  }

  auto fresh = make_engine(backend, w);
  expect_bitwise_equal(decode(*e, x, 2, small), decode(*fresh, x, 2, small));
}

// The device-resident entry points: a failed upload leaves no batch, so enqueueing refuses until a
// state fits; then the engine decodes what the host path does.
TEST_P(GpuFaults, FailedUploadLeavesNoBatchToEnqueueOn) {
  const std::string backend = GetParam();
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, D = w.cfg.d_model;
  auto e = make_engine(backend, w);
  cuda::GpuEngine* g = cuda::gpu_engine_of(*e);
  ASSERT_NE(g, nullptr);
  const State small = random_state(w.cfg, B, 51);
  g->upload_state(small);

  {
    MemoryHog hog(kLeft);
    const State huge = random_state(w.cfg, kHugeBatch, 52);
    EXPECT_THROW(g->upload_state(huge), Error);
  }
  const std::vector<float> x = decode_inputs(53, 1, B, D);
  cuda::DeviceBuffer<float> xd, dd(x.size());
  xd.upload(x);
  EXPECT_THROW(g->enqueue_decode(xd.get(), dd.get(), 1), Error);
  State got = small;
  EXPECT_THROW(g->download_state(got), Error);
  EXPECT_TRUE(got == small);

  g->upload_state(small);
  g->enqueue_decode(xd.get(), dd.get(), 1);
  g->download_state(got);
  std::vector<float> delta(x.size());
  ASSERT_EQ(cudaMemcpy(delta.data(), dd.get(), delta.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  auto fresh = make_engine(backend, w);
  State want = small;
  std::vector<float> want_delta(x.size(), std::numeric_limits<float>::quiet_NaN());
  fresh->decode(x.data(), want_delta.data(), 1, want, nullptr);
  EXPECT_TRUE(got == want);
  EXPECT_EQ(0, std::memcmp(delta.data(), want_delta.data(), delta.size() * sizeof(float))) << "delta differs";
}

// A slot step whose batch does not fit is refused with every slot as it was; the next slot step gives
// a fresh engine's bits.
TEST_P(GpuFaults, SlotStepBeyondFreeMemoryLeavesThePoolAsItWas) {
  const std::string backend = GetParam();
  const Weights& w = weights_of("tiny");
  const int64_t D = w.cfg.d_model;
  const State two = random_state(w.cfg, 2, 46);
  const auto filled_pool = [&](Engine& e) {
    auto pool = e.make_pool(kHugeBatch);  // ~335 MB of tiny states, made before the hog
    State one = State::init(w.cfg, 1);
    for (int64_t b = 0; b < 2; ++b) {
      two.copy_sequence_to(b, one, 0);
      pool->set(int32_t(b), one);
    }
    return pool;
  };
  auto e = make_engine(backend, w);
  auto pool = filled_pool(*e);
  std::vector<int32_t> all(static_cast<size_t>(kHugeBatch));
  for (size_t s = 0; s < all.size(); ++s) all[s] = int32_t(s);
  {
    MemoryHog hog(kLeft);
    const std::vector<float> xh = decode_inputs(47, 1, kHugeBatch, D);
    std::vector<float> delta(xh.size(), std::numeric_limits<float>::quiet_NaN());
    EXPECT_THROW(e->step_slots(xh.data(), all, delta.data(), *pool), Error);
    EXPECT_TRUE(all_nan(delta));
  }
  State one = State::init(w.cfg, 1);
  for (int64_t b = 0; b < 2; ++b) {
    two.copy_sequence_to(b, one, 0);
    EXPECT_TRUE(pool->get(int32_t(b)) == one) << "slot " << b;
  }
  EXPECT_TRUE(pool->get(int32_t(kHugeBatch - 1)) == State::init(w.cfg, 1));

  const std::vector<float> x = decode_inputs(48, 1, 2, D);
  std::vector<float> got(x.size()), want(x.size());
  e->step_slots(x.data(), {1, 0}, got.data(), *pool);
  auto fresh = make_engine(backend, w);
  auto fresh_pool = filled_pool(*fresh);
  fresh->step_slots(x.data(), {1, 0}, want.data(), *fresh_pool);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "delta differs";
  for (int32_t s : {0, 1}) EXPECT_TRUE(pool->get(s) == fresh_pool->get(s)) << "slot " << s;
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuFaults, ::testing::Values("unfused", "fused", "fused-fp8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');  // test names take no '-'
                           return n;
                         });

}  // namespace
}  // namespace swapffn
