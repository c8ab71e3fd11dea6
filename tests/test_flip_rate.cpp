// The free-running decision flip rate (swapffn/flip_rate.hpp): none between an engine and its twin,
// some against a perturbed model, counted as the traces say, and bad arguments refused.
#include <gtest/gtest.h>

#include <random>

#include "engine_test_options.hpp"
#include "io_test_util.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/flip_rate.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

using testing::expect_error;

TEST(FlipRate, AnEngineAgainstItsTwinFlipsNothing) {
  const Weights w = Weights::random(Config::preset("tiny"), 3);
  auto a = make_engine("reference", w, testing::threads(2)), b = make_engine("reference", w, testing::threads(1));
  const FlipRate r = decision_flip_rate(*a, *b, 3, 4, 5);
  ASSERT_EQ(r.tokens, 4);
  ASSERT_EQ(r.decisions.size(), 4u);
  const int64_t gates = w.cfg.n_events * 3 * w.cfg.core_count;
  for (int64_t t = 0; t < 4; ++t) {
    EXPECT_EQ(r.flips[size_t(t)], 0) << t;
    EXPECT_GT(r.decisions[size_t(t)], gates) << t;  // every gate and some open ones' slots
    EXPECT_LT(r.decisions[size_t(t)], 2 * gates) << t;
    EXPECT_EQ(r.rate(t), 0.0);
  }
  EXPECT_EQ(r.overall(), 0.0);
  EXPECT_EQ(r.per_token(), "0.0% 0.0% 0.0% 0.0%");
  EXPECT_EQ(r.engine, "reference");
  EXPECT_EQ(r.batch, 3);
}

TEST(FlipRate, APerturbedModelFlipsAsItsTracesSay) {
  const uint64_t seed = std::random_device{}();
  const Weights w = Weights::random(Config::preset("tiny"), 8);
  Weights v = w;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (bf16& x : v.router_w) x = float_to_bf16(bf16_to_float(x) * (1.0f + noise(rng)));
  auto a = make_engine("reference", v, testing::threads(2)), b = make_engine("reference", w, testing::threads(2));
  const int64_t B = 2, T = 3;
  const FlipRate r = decision_flip_rate(*a, *b, B, T, 9);

  // The same count from the engines' own free runs.
  const std::vector<float> x = decode_inputs(9, T, B, w.cfg.d_model);
  std::vector<Trace> ta, tb;
  std::vector<float> delta(x.size());
  State sa = State::init(w.cfg, B), sb = State::init(w.cfg, B);
  a->decode(x.data(), delta.data(), T, sa, &ta);
  b->decode(x.data(), delta.data(), T, sb, &tb);
  int64_t total = 0;
  for (int64_t t = 0; t < T; ++t) {
    int64_t decisions = 0, flips = 0;
    const Trace &p = ta[size_t(t)], &q = tb[size_t(t)];
    for (size_t i = 0; i < p.gate.size(); ++i) {
      ++decisions;
      flips += p.gate[i] != q.gate[i];
      if (p.gate[i] && q.gate[i]) {
        ++decisions;
        flips += p.slot[i] != q.slot[i];
      }
    }
    EXPECT_EQ(r.decisions[size_t(t)], decisions) << t << ", seed " << seed;
    EXPECT_EQ(r.flips[size_t(t)], flips) << t << ", seed " << seed;
    EXPECT_DOUBLE_EQ(r.rate(t), double(flips) / double(decisions));
    total += flips;
  }
  EXPECT_GT(total, 0) << "seed " << seed;
  EXPECT_GT(r.overall(), 0.0);
  EXPECT_LT(r.overall(), 0.5) << "seed " << seed;  // a 5% perturbation does not scramble everything
}

TEST(FlipRate, RefusesBadArguments) {
  const Weights w = Weights::random(Config::preset("tiny"), 3);
  Config c = w.cfg;
  c.collapse_r = 12;
  auto a = make_engine("reference", w), b = make_engine("reference", Weights::random(c, 3));
  expect_error([&] { decision_flip_rate(*a, *b, 1, 1, 1); }, {"flip rate", "different configs"});
  expect_error([&] { decision_flip_rate(*a, *a, 0, 1, 1); }, {"flip rate: batch"});
  expect_error([&] { decision_flip_rate(*a, *a, 1, 0, 1); }, {"flip rate: tokens"});
}

}  // namespace
}  // namespace swapffn
