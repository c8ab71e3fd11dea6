// The random initialisation (Weights::random) must make the model exercise its memory: a fair share
// of gates open, and activations finite and O(1) through all events. Measured with the reference on
// the tiny config and on a scaled-down default-like config (default ratios: F = 4D, R = 64, K = 8,
// E = 8 events of 2 FFN steps; fewer cores and a smaller D to stay cheap on a CI CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "naive_swapffn.hpp"
#include "engine_test_options.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

struct Stats {
  double gate_open = 0;          // fraction of decisions with the gate open
  double ram_row_rms_min = 1e30, ram_row_rms_max = 0;
  double delta_rms = 0;
  bool finite = true;
};

Stats measure(const Config& cfg, int64_t batch, int64_t tokens) {
  const Weights w = Weights::random(cfg, 1);
  auto eng = make_engine("reference", w);
  State st = State::init(cfg, batch);
  const int64_t D = cfg.d_model;
  Stats s;
  int64_t open = 0, total = 0;
  double dsq = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const auto x = token_inputs(2, t, batch, D);
    std::vector<float> delta(batch * D);
    Trace tr;
    eng->step(x.data(), delta.data(), st, testing::step_opts(&tr));
    for (uint8_t g : tr.gate) open += g, ++total;
    for (float v : delta) {
      s.finite = s.finite && std::isfinite(v);
      dsq += double(v) * v;
    }
  }
  s.gate_open = double(open) / double(total);
  s.delta_rms = std::sqrt(dsq / double(tokens * batch * D));
  // Every non-zero bank row is a swapped-out h: its rms tells the scale of h along the way.
  for (size_t r = 0; r < st.ram.size() / D; ++r) {
    double sq = 0;
    for (int64_t d = 0; d < D; ++d) {
      const float v = bf16_to_float(st.ram[r * D + d]);
      s.finite = s.finite && std::isfinite(v);
      sq += double(v) * v;
    }
    if (sq == 0) continue;
    const double rms = std::sqrt(sq / D);
    s.ram_row_rms_min = std::min(s.ram_row_rms_min, rms);
    s.ram_row_rms_max = std::max(s.ram_row_rms_max, rms);
  }
  return s;
}

void expect_fair(const Stats& s) {
  EXPECT_TRUE(s.finite);
  EXPECT_GE(s.gate_open, 0.15);
  EXPECT_LE(s.gate_open, 0.85);
  EXPECT_GE(s.ram_row_rms_min, 0.05);
  EXPECT_LE(s.ram_row_rms_max, 20.0);
  EXPECT_GT(s.delta_rms, 1e-3);
  EXPECT_LT(s.delta_rms, 100.0);
}

TEST(RandomInit, TinyConfigSwapsAFairShareAndStaysBounded) {
  const Stats s = measure(Config::preset("tiny"), 2, 4);
  RecordProperty("gate_open", std::to_string(s.gate_open));
  expect_fair(s);
}

TEST(RandomInit, DefaultLikeConfigSwapsAFairShareAndStaysBounded) {
  Config cfg = Config::preset("default");
  cfg.d_model = 256;
  cfg.d_ff = 1024;
  cfg.core_count = 24;
  cfg.collapse_r = 56;
  const Stats s = measure(cfg, 1, 2);
  RecordProperty("gate_open", std::to_string(s.gate_open));
  expect_fair(s);
}

TEST(RandomInit, HiddenVectorStaysOrderOneThroughEveryEvent) {
  // The naive implementation exposes h after every event (rms over D) on a default-like config.
  Config cfg = Config::preset("default");
  cfg.d_model = 128;
  cfg.d_ff = 512;
  cfg.core_count = 8;
  cfg.collapse_r = 28;
  const Weights w = Weights::random(cfg, 1);
  const testing::NaiveSwapFfn naive(w);
  State st = State::init(cfg, 1);
  double lo = 1e30, hi = 0;
  int64_t nonzero = 0;
  for (int64_t t = 0; t < 2; ++t) {
    const auto r = naive.step(token_inputs(3, t, 1, cfg.d_model), st);
    st = r.state;
    for (double v : r.h_rms) {
      ASSERT_TRUE(std::isfinite(v));
      if (v == 0) continue;  // a core that swapped in an empty bank
      ++nonzero;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  EXPECT_GT(nonzero, 0);
  EXPECT_GE(lo, 0.05);
  EXPECT_LE(hi, 20.0);
}

}  // namespace
}  // namespace swapffn
