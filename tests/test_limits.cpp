// Size limits: checked products, the bounds on batch, tokens, slots and threads in the library and
// the CLI, and failed host allocations reported by name (docs/FORMATS.md, "Limits").
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cli_test_util.hpp"
#include "io_test_util.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/check.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

using testing::expect_error;

constexpr int64_t kHuge = int64_t{1} << 61;  // 2305843009213693952: B*C*4*D wraps for any real C, D

TEST(Limits, CheckedProductMatchesWideArithmeticOrNamesTheQuantity) {
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 2000; ++i) {
    auto draw = [&] { return int64_t((rng() >> 7) >> (rng() % 57)); };  // [0, 2^57): a*b*c fits __int128
    const int64_t a = draw(), b = draw(), c = int64_t(rng() % 4096);
    const __int128 wide = __int128(a) * b * c;
    if (wide <= INT64_MAX) {
      EXPECT_EQ(checked_product({a, b, c}, "q"), int64_t(wide));
      EXPECT_EQ(saturating_product({a, b, c}), int64_t(wide));
    } else {
      expect_error([&] { checked_product({a, b, c}, "the quantity"); }, {"the quantity", "64 bits"});
      EXPECT_EQ(saturating_product({a, b, c}), INT64_MAX);
    }
  }
  expect_error([] { checked_product({3, -2}, "rows"); }, {"rows = 3 * -2", "negative"});
  EXPECT_EQ(checked_product({kHuge, kHuge, 0}, "q"), 0);  // a zero factor: nothing to allocate
  EXPECT_EQ(saturating_product({kHuge, kHuge, 0}), 0);
  EXPECT_EQ(saturating_product({kHuge, -1}), INT64_MAX);
  EXPECT_EQ(saturating_sum({INT64_MAX - 1, 1}), INT64_MAX);
  EXPECT_EQ(saturating_sum({INT64_MAX, 1}), INT64_MAX);
  EXPECT_EQ(saturating_sum({2, 3}), 5);
}

TEST(Limits, FailedAllocationIsNamedAndLeavesTheVector) {
  std::vector<float> v = {1.f, 2.f};
  // More than any address space holds: refused by the allocator whatever the overcommit policy.
  expect_error([&] { allocate(v, int64_t{1} << 58, 0.f, "the test buffer"); },
               {"out of host memory", "the test buffer", "GiB"});
  expect_error([&] { allocate(v, int64_t{1} << 62, 0.f, "the test buffer"); }, {"out of host memory"});
  EXPECT_EQ(v, (std::vector<float>{1.f, 2.f}));
  allocate(v, 3, 7.f, "the test buffer");
  EXPECT_EQ(v, (std::vector<float>{7.f, 7.f, 7.f}));
}

TEST(Limits, StateSizesAreBounded) {
  const Config cfg = Config::preset("tiny");
  expect_error([&] { State::init(cfg, kHuge); }, {"state batch", "2305843009213693952", "65536"});
  expect_error([&] { State::init(cfg, kMaxBatch + 1); }, {"state batch", "65537"});
  expect_error([&] { State::random(cfg, -1, 1); }, {"state batch", "-1"});
  State s = State::init(cfg, 2);
  s.batch = kHuge;  // arrays of a 2-sequence state, a batch that would wrap B*C*4*D
  expect_error([&] { s.validate(); }, {"state batch", "2305843009213693952"});
  s.batch = 2;
  s.d_model = kHuge;
  expect_error([&] { s.validate(); }, {"B*C*4*D", "64 bits"});
}

TEST(Limits, InputsAndTracesRefuseSizesThatWrap) {
  // Before: the product wrapped, reserve() got a small number and the loop grew memory without end.
  expect_error([] { decode_inputs(1, int64_t{1} << 57, 1, 1024); }, {"T*B*D", "64 bits"});
  expect_error([] { token_inputs(1, 0, kHuge, 1024); }, {"B*D", "64 bits"});
  Trace t;
  t.resize(2, 3, 4);
  const Trace before = t;
  expect_error([&] { t.resize(1 << 20, kHuge, 40); }, {"E*B*C", "64 bits"});
  EXPECT_EQ(t, before);
}

class EngineLimits : public ::testing::Test {
 protected:
  Weights w = Weights::random(Config::preset("tiny"), std::random_device{}());
};

TEST_F(EngineLimits, DecodeRefusesTokensPastTheBoundAndLeavesTheState) {
  auto engine = make_engine("reference", w);
  State st = State::random(w.cfg, 1, 7);
  const State before = st;
  std::vector<float> x(w.cfg.d_model, 0.5f), delta(w.cfg.d_model, NAN);
  std::vector<Trace> record;
  for (int64_t tokens : {int64_t{-1}, kMaxTokens + 1, kHuge}) {
    SCOPED_TRACE(tokens);
    expect_error([&] { engine->decode(x.data(), delta.data(), tokens, st, &record); },
                 {"decode tokens", std::to_string(tokens), "16777216"});
  }
  EXPECT_EQ(st, before);
  EXPECT_TRUE(std::isnan(delta[0]));
  EXPECT_TRUE(record.empty());
}

TEST_F(EngineLimits, PoolsAndSlotStepsAreBounded) {
  auto engine = make_engine("reference", w);
  expect_error([&] { engine->make_pool(kMaxBatch + 1); }, {"state pool slots", "65537", "65536"});
  expect_error([&] { engine->make_pool(0); }, {"state pool slots", "0"});
  auto pool = engine->make_pool(2);
  const State before = pool->get(1);
  // Padding rows may repeat, so only the bound keeps B = slot_ids.size() finite.
  std::vector<int32_t> ids(static_cast<size_t>(kMaxBatch + 1), kPaddingSlot);
  ids[0] = 1;
  std::vector<float> x(ids.size() * static_cast<size_t>(w.cfg.d_model), 0.25f), delta(x.size(), NAN);
  expect_error([&] { engine->step_slots(x.data(), ids, delta.data(), *pool); },
               {"rows in one slot step", "65537"});
  EXPECT_EQ(pool->get(1), before);
}

TEST_F(EngineLimits, ReferenceThreadsAreBounded) {
  EngineOptions eo;
  eo.threads = static_cast<int>(kMaxThreads) + 1;
  expect_error([&] { make_engine("reference", w, eo); }, {"threads", "1025", "1024"});
  eo.threads = -1;
  expect_error([&] { make_engine("reference", w, eo); }, {"threads", "-1"});
}

TEST_F(EngineLimits, CheckRefusesBatchAndTokensPastTheBound) {
  auto engine = make_engine("reference", w);
  const Tolerance tol = Tolerance::fp32();
  expect_error([&] { check_backend(w, *engine, kHuge, 1, 1, tol, 1); }, {"batch", "2305843009213693952"});
  expect_error([&] { check_backend(w, *engine, 1, kHuge, 1, tol, 1); }, {"tokens", "2305843009213693952"});
}

// The CLI: each value refused in one line naming the flag and its bound, before any work.
class CliLimits : public testing::Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    ASSERT_EQ(cli("init --config tiny --out " + model).code, 0);
  }
  const std::string model = path("tiny.safetensors");
};

TEST_F(CliLimits, BatchTokensAndThreadsPastTheBoundAreRefused) {
  for (const char* cmd : {"run", "check --backend reference"}) {
    SCOPED_TRACE(cmd);
    const std::string base = std::string(cmd) + " --model " + model;
    expect_error(base + " --batch 2305843009213693952", "--batch = 2305843009213693952 is out of range: must be in [1, 65536]");
    expect_error(base + " --batch 65537", "--batch = 65537");
    expect_error(base + " --tokens 144115188075855872", "--tokens = 144115188075855872 is out of range: must be in [1, 16777216]");
    expect_error(base + " --tokens 0", "--tokens = 0");
    expect_error(base + " --threads 100000", "--threads = 100000 is out of range: must be in [0, 1024]");
  }
}

TEST_F(CliLimits, InputsTooLargeForMemoryAreNamed) {
  // 2^24 tokens x 4096 sequences x d_model 1024 floats: 256 TiB, past any address space.
  const std::string wide = path("wide.safetensors");
  ASSERT_EQ(cli("init --config tiny --set core_count=1 --set d_model=1024 --out " + wide).code, 0);
  const testing::Result r = cli("run --model " + wide + " --batch 4096 --tokens 16777216");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("out of host memory: the inputs x [T, B, D] of 16777216 tokens needs"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace swapffn
