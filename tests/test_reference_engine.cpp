// The reference engine against the naive implementation (tests/naive_swapffn.hpp) on random weights,
// and its contract: batch independence, determinism, thread-count independence, trace following,
// and bad input leaving the state bitwise unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "naive_swapffn.hpp"
#include "engine_test_options.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"

namespace swapffn {
namespace {

Config tiny() { return Config::preset("tiny"); }

// Runs `tokens` steps from `st`, returning all deltas [T, B, D] and recording traces.
std::vector<float> run(Engine& eng, State& st, uint64_t seed, int64_t tokens, std::vector<Trace>* traces = nullptr) {
  const int64_t n = st.batch * eng.config().d_model;
  const auto x = decode_inputs(seed, tokens, st.batch, eng.config().d_model);
  std::vector<float> delta(tokens * n);
  if (traces) traces->assign(tokens, Trace{});
  for (int64_t t = 0; t < tokens; ++t) {
    StepOptions o;
    if (traces) o.record = &(*traces)[t];
    eng.step(x.data() + t * n, delta.data() + t * n, st, o);
  }
  return delta;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ReferenceEngine, AgreesWithNaiveImplementation) {
  const Config cfg = tiny();
  const Weights w = Weights::random(cfg, 11);
  auto eng = make_engine("reference", w, testing::threads(2));
  const testing::NaiveSwapFfn naive(w);
  const int64_t B = 2, D = cfg.d_model;
  State st = State::init(cfg, B);
  int64_t decisions = 0, swaps = 0;
  for (int64_t t = 0; t < 3; ++t) {
    const auto x = token_inputs(5, t, B, D);
    std::vector<float> delta(B * D);
    Trace tr;
    const State before = st;
    eng->step(x.data(), delta.data(), st, testing::step_opts(&tr));
    // The naive code follows the engine's trace so one near-tie cannot fork the two runs; its own
    // decisions must match wherever its margin is clear of rounding.
    const auto ref = naive.step(x, before, &tr);
    for (size_t i = 0; i < tr.gate.size(); ++i) {
      ++decisions;
      swaps += tr.gate[i];
      if (ref.s_abs[i] > 1e-4) {
        EXPECT_EQ(tr.gate[i], ref.own.gate[i]) << "token " << t << " i " << i;
      }
      if (ref.gap[i] > 1e-4) {
        EXPECT_EQ(tr.slot[i], ref.own.slot[i]) << "token " << t << " i " << i;
      }
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < B * D; ++i) {
      num += (delta[i] - ref.delta[i]) * (delta[i] - ref.delta[i]);
      den += ref.delta[i] * ref.delta[i];
    }
    EXPECT_GT(den, 0);
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "token " << t;
    EXPECT_EQ(st.stream_map, ref.state.stream_map) << "token " << t;
    // RAM: bf16 of an fp32 h vs of an fp64 h: equal but for rare one-ulp rounding flips.
    int64_t off = 0;
    for (size_t i = 0; i < st.ram.size(); ++i) {
      const int diff = std::abs(int(st.ram[i].bits) - int(ref.state.ram[i].bits));
      ASSERT_LE(diff, 1) << "ram element " << i;
      off += diff;
    }
    EXPECT_LE(off, static_cast<int64_t>(st.ram.size() / 1000 + 1));
  }
  EXPECT_GT(swaps, decisions / 10) << "too few swaps for the comparison to mean anything";
}

TEST(ReferenceEngine, BatchIndependence) {
  const Config cfg = tiny();
  const Weights w = Weights::random(cfg, 3);
  auto eng = make_engine("reference", w, testing::threads(2));
  const int64_t D = cfg.d_model, T = 3;
  // Alone: sequence with inputs from seed 100.
  State alone = State::init(cfg, 1);
  std::vector<float> d_alone(T * D);
  std::vector<std::vector<float>> x_alone(T);
  for (int64_t t = 0; t < T; ++t) {
    x_alone[t] = token_inputs(100, t, 1, D);
    eng->step(x_alone[t].data(), &d_alone[t * D], alone);
  }
  for (int64_t B : {3, 5}) {
    for (int64_t pos : {int64_t{0}, B - 1}) {
      State batch = State::init(cfg, B);
      std::vector<float> d_batch(T * B * D);
      for (int64_t t = 0; t < T; ++t) {
        auto x = token_inputs(200 + B + pos, t, B, D);  // batch-mates differ per case
        std::copy(x_alone[t].begin(), x_alone[t].end(), x.begin() + pos * D);
        eng->step(x.data(), &d_batch[t * B * D], batch);
      }
      for (int64_t t = 0; t < T; ++t)
        EXPECT_EQ(0, std::memcmp(&d_alone[t * D], &d_batch[(t * B + pos) * D], D * sizeof(float)))
            << "B " << B << " pos " << pos << " token " << t;
      State mine = State::init(cfg, 1);
      batch.copy_sequence_to(pos, mine, 0);
      EXPECT_EQ(mine, alone) << "B " << B << " pos " << pos;
    }
  }
}

TEST(ReferenceEngine, DeterministicAndIndependentOfThreadCount) {
  const Config cfg = tiny();
  const Weights w = Weights::random(cfg, 4);
  std::vector<float> first;
  std::vector<Trace> first_tr;
  State first_state;
  for (int threads : {1, 4, 4, 3}) {
    auto eng = make_engine("reference", w, testing::threads(threads));
    State st = State::init(cfg, 2);
    std::vector<Trace> tr;
    const auto d = run(*eng, st, 9, 3, &tr);
    if (first.empty()) {
      first = d, first_tr = tr, first_state = st;
      continue;
    }
    EXPECT_TRUE(bitwise_equal(d, first)) << threads << " threads";
    EXPECT_EQ(tr, first_tr) << threads << " threads";
    EXPECT_EQ(st, first_state) << threads << " threads";
  }
}

TEST(ReferenceEngine, FollowingTheRecordedTraceReproducesTheRunBitwise) {
  const Config cfg = tiny();
  const Weights w = Weights::random(cfg, 5);
  auto eng = make_engine("reference", w, testing::threads(2));
  const int64_t B = 2, D = cfg.d_model, T = 2;
  State st = State::init(cfg, B);
  std::vector<Trace> tr;
  const auto d = run(*eng, st, 21, T, &tr);

  const auto x = decode_inputs(21, T, B, D);
  const testing::NaiveSwapFfn naive(w);
  State again = State::init(cfg, B);
  std::vector<float> d2(T * B * D);
  for (int64_t t = 0; t < T; ++t) {
    Trace rec;
    FollowReport rep;
    const State before = again;
    eng->step(&x[t * B * D], &d2[t * B * D], again, testing::step_opts(&rec, &tr[t], &rep));
    EXPECT_EQ(rec, tr[t]);       // recording while following records what was applied
    EXPECT_EQ(rep.own, tr[t]);   // its own decisions are the ones it recorded before
    // Margins are |s| and the top-2 logit gap of its own computation (naive: fp64).
    const auto ref = naive.step(std::vector<float>(&x[t * B * D], &x[(t + 1) * B * D]), before, &tr[t]);
    ASSERT_EQ(rep.gate_margin.size(), ref.s_abs.size());
    for (size_t i = 0; i < ref.s_abs.size(); ++i) {
      EXPECT_NEAR(rep.gate_margin[i], ref.s_abs[i], 1e-5 * (1 + ref.s_abs[i])) << i;
      EXPECT_NEAR(rep.slot_margin[i], ref.gap[i], 1e-5 * (1 + ref.gap[i])) << i;
      EXPECT_GE(rep.gate_margin[i], 0.0f);
      EXPECT_GE(rep.slot_margin[i], 0.0f);
    }
  }
  EXPECT_TRUE(bitwise_equal(d, d2));
  EXPECT_EQ(st, again);
}

TEST(ReferenceEngine, FlippingOneGateChangesExactlyThatCoreAndSequence) {
  const Config cfg = tiny();
  const Weights w = Weights::random(cfg, 6);
  auto eng = make_engine("reference", w, testing::threads(2));
  const int64_t B = 3, C = cfg.core_count, D = cfg.d_model;
  const State init = State::init(cfg, B);
  const auto x = token_inputs(33, 0, B, D);

  State base = init;
  std::vector<float> d_base(B * D);
  Trace tr;
  eng->step(x.data(), d_base.data(), base, testing::step_opts(&tr));

  // Flip the gate of sequence 1, core 7 at event 0 (either way round, the core must change).
  const int64_t fb = 1, fc = 7;
  Trace flipped = tr;
  const int64_t fi = flipped.index(0, fb, fc);
  flipped.gate[fi] ^= 1;

  State st = init;
  std::vector<float> d(B * D);
  Trace rec;
  FollowReport rep;
  eng->step(x.data(), d.data(), st, testing::step_opts(&rec, &flipped, &rep));

  for (int64_t b = 0; b < B; ++b) {
    const bool mine = b == fb;
    EXPECT_EQ(mine, std::memcmp(&d[b * D], &d_base[b * D], D * sizeof(float)) != 0) << "delta of sequence " << b;
    for (int64_t c = 0; c < C; ++c) {
      const bool core = mine && c == fc;
      const size_t r0 = ((b * C + c) * 4) * D;
      const bool ram_same = std::equal(st.ram.begin() + r0, st.ram.begin() + r0 + 4 * D, base.ram.begin() + r0);
      const bool map_same = st.stream_map[b * C + c] == base.stream_map[b * C + c];
      EXPECT_EQ(core, !(ram_same && map_same)) << "state of sequence " << b << " core " << c;
      for (int64_t e = 0; e < cfg.n_events; ++e) {
        const int64_t i = tr.index(e, b, c);
        if (!core) {
          EXPECT_EQ(rep.own.gate[i], tr.gate[i]);
          EXPECT_EQ(rep.own.slot[i], tr.slot[i]);
        }
        EXPECT_EQ(rec.gate[i], flipped.gate[i]);
      }
    }
  }
  // At the flipped decision itself the engine still reports its own (unflipped) choice.
  EXPECT_EQ(rep.own.gate[fi], tr.gate[fi]);
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    w = Weights::random(tiny(), 8);
    eng = make_engine("reference", w, testing::threads(2));
    st = State::init(w.cfg, 2);
    // A non-trivial state: one token decoded.
    x = token_inputs(1, 0, 2, w.cfg.d_model);
    delta.assign(x.size(), 0.0f);
    eng->step(x.data(), delta.data(), st);
    x = token_inputs(1, 1, 2, w.cfg.d_model);
    delta.assign(x.size(), 12345.0f);
  }
  // Runs the step expecting an Error whose message contains `what`; state and delta unchanged.
  void expect_refused(State& s, const std::string& what, const StepOptions& o = {}) {
    const State before = s;
    try {
      eng->step(x.data(), delta.data(), s, o);
      ADD_FAILURE() << "no error, expected one mentioning: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_EQ(s, before);
    for (float v : delta) ASSERT_EQ(v, 12345.0f);
  }
  Weights w;
  std::unique_ptr<Engine> eng;
  State st;
  std::vector<float> x, delta;
};

TEST_F(BadInput, NonFiniteXNamesTheIndex) {
  x[130] = std::nanf("");
  expect_refused(st, "index 130");
  x[130] = 0;
  x[7] = -INFINITY;
  expect_refused(st, "index 7");
}

// Finite values near the float limit overflowed the sums of squares into NaN deltas: refused instead.
TEST_F(BadInput, XBeyondTheEnginesRangeIsRefused) {
  x[5] = 1e38f;
  expect_refused(st, "value out of range in x at index 5 (1e+38)");
  x[5] = -4.3e9f;
  expect_refused(st, "index 5");
  x[5] = 4294967296.0f;  // 2^32 itself is accepted
  std::vector<float> d(delta.size());
  State s = st;
  eng->step(x.data(), d.data(), s);
  for (float v : d) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(BadInput, StateOfAnotherShape) {
  Config other = w.cfg;
  other.core_count += 1;
  State s = State::init(other, 2);
  expect_refused(s, "cores");
  State t = st;
  t.ram.pop_back();  // sizes no longer match the arrays
  expect_refused(t, "ram");
}

TEST_F(BadInput, InvalidStreamMap) {
  State s = st;
  s.stream_map[w.cfg.core_count + 3] = 0x00;  // every lane names bank 0
  expect_refused(s, "invalid stream map byte 0x00 at sequence 1, core 3");
}

TEST_F(BadInput, MalformedTraceToFollow) {
  Trace tr;
  tr.resize(w.cfg.n_events, 1, w.cfg.core_count);  // batch 1, state has 2
  expect_refused(st, "trace to follow", testing::step_opts(nullptr, &tr));
  tr.resize(w.cfg.n_events, 2, w.cfg.core_count);
  tr.gate.pop_back();
  expect_refused(st, "entries", testing::step_opts(nullptr, &tr));
  tr.resize(w.cfg.n_events, 2, w.cfg.core_count);
  tr.gate[5] = 2;
  expect_refused(st, "gate at index 5", testing::step_opts(nullptr, &tr));
  tr.gate[5] = 1;
  tr.slot[9] = 4;
  expect_refused(st, "slot at index 9", testing::step_opts(nullptr, &tr));
}

TEST(ReferenceEngineOptions, NegativeThreadCountIsRefused) {
  const Weights w = Weights::random(tiny(), 1);
  EXPECT_THROW(make_engine("reference", w, testing::threads(-1)), Error);
}

}  // namespace
}  // namespace swapffn
