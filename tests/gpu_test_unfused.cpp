// The unfused GPU backend: agreement with the reference (SPEC section 5, bf16 tolerance preset of
// check.hpp: tau 0.05 on decision margins, relative L2 error <= 2e-2 for delta and final RAM),
// bitwise determinism (graph vs eager, run vs run, decode vs repeated step), bitwise batch
// invariance, and refusal of bad input with the state unchanged. Skips without a Hopper GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gpu_backend_test_util.hpp"
#include "swapffn/check.hpp"
#include "swapffn/device.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {
namespace {

using gpu_test::decode;
using gpu_test::Decoded;
using gpu_test::expect_bad_input_refused;
using gpu_test::expect_bitwise_equal;
using gpu_test::random_state;
using gpu_test::weights_of;

std::unique_ptr<Engine> unfused(const Weights& w, bool graph) {
  EngineOptions o;
  o.graph = graph;
  return make_engine("unfused", w, o);
}

// ---- agreement with the reference (trace following) ----

struct CheckCase {
  const char* preset;
  int64_t batch, tokens;
};

class UnfusedCheck : public ::testing::TestWithParam<CheckCase> {};

TEST_P(UnfusedCheck, AgreesWithReferenceWithinBf16Tolerance) {
  const auto [preset, batch, tokens] = GetParam();
  const Weights& w = weights_of(preset);
  auto e = unfused(w, true);
  const Tolerance tol = Tolerance::bf16();
  const CheckReport r = check_backend(w, *e, batch, tokens, 101 + static_cast<uint64_t>(batch), tol);
  std::printf("[unfused %s B=%lld T=%lld] %s\n", preset, static_cast<long long>(batch),
              static_cast<long long>(tokens), r.summary().c_str());
  EXPECT_TRUE(r.passed()) << r.summary();
  EXPECT_TRUE(r.stream_maps_equal);
  EXPECT_GT(r.gate_checked, 0);
}

// The default model's reference costs ~206 GFLOP per token and sequence on the CPU: one short run.
INSTANTIATE_TEST_SUITE_P(Presets, UnfusedCheck,
                         ::testing::Values(CheckCase{"tiny", 1, 6}, CheckCase{"tiny", 3, 6},
                                           CheckCase{"default", 1, 2}),
                         [](const auto& info) {
                           return std::string(info.param.preset) + "_B" + std::to_string(info.param.batch) +
                                  "_T" + std::to_string(info.param.tokens);
                         });

// Sizes that are not multiples of anything, residual and collapse silu off, and the degenerate
// event/FFN counts: the backend must run them (cuBLASLt takes any shape) and agree.
TEST(Unfused, OddConfigsAgreeWithReference) {
  std::vector<std::vector<std::string>> variants = {
      {"d_model=96", "d_ff=200", "core_count=7", "n_events=2", "k_ffn=1", "d_router=6", "collapse_k=3",
       "collapse_r=10", "core_embed_dim=4", "ffn_residual=false", "collapse_silu=false"},
      {"n_events=0"},
      {"k_ffn=0"},
      {"d_model=1152", "core_count=8"},  // RMSNorm rows too long to stay in registers (two passes)
      // The collapse's pooling in three passes over k (8 + 8 + 3, a barrier between them) and a
      // last core chunk of 8 (32 + 8 cores).
      {"collapse_k=19", "core_count=40"},
  };
  for (const auto& sets : variants) {
    Config cfg = Config::preset("tiny");
    std::string label;
    for (const auto& kv : sets) {
      cfg.set(kv);
      label += kv + " ";
    }
    cfg.validate();
    const Weights w = Weights::random(cfg, 7);
    auto e = unfused(w, true);
    const CheckReport r = check_backend(w, *e, 2, 3, 5, Tolerance::bf16());
    EXPECT_TRUE(r.passed()) << label << ": " << r.summary();
  }
}

// ---- bitwise determinism ----

TEST(Unfused, GraphAndEagerAreBitwiseIdentical) {
  for (const char* preset : {"tiny", "default"}) {
    const Weights& w = weights_of(preset);
    const int64_t B = 2, T = 4;
    const State s0 = random_state(w.cfg, B, 3);
    const auto x = decode_inputs(17, T, B, w.cfg.d_model);
    auto g = unfused(w, true);
    auto n = unfused(w, false);
    const Decoded rg = decode(*g, x, T, s0);
    const Decoded rn = decode(*n, x, T, s0);
    SCOPED_TRACE(preset);
    expect_bitwise_equal(rg, rn);
    // A second call replays the captured graph from its first token on.
    expect_bitwise_equal(decode(*g, x, T, s0), rn);
  }
}

TEST(Unfused, RunsAreBitwiseIdenticalAcrossCallsAndEngines) {
  const Weights& w = weights_of("default");
  const int64_t B = 3, T = 3;
  const State s0 = random_state(w.cfg, B, 4);
  const auto x = decode_inputs(18, T, B, w.cfg.d_model);
  auto a = unfused(w, true);
  const Decoded r1 = decode(*a, x, T, s0);
  expect_bitwise_equal(r1, decode(*a, x, T, s0));
  auto b = unfused(w, true);
  expect_bitwise_equal(r1, decode(*b, x, T, s0));
}

TEST(Unfused, DecodeEqualsRepeatedSteps) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 3, T = 4, D = w.cfg.d_model;
  const State s0 = random_state(w.cfg, B, 5);
  const auto x = decode_inputs(19, T, B, D);
  auto e = unfused(w, true);
  const Decoded whole = decode(*e, x, T, s0);
  Decoded steps{std::vector<float>(x.size(), std::numeric_limits<float>::quiet_NaN()), s0, {}};
  steps.traces.resize(T);
  for (int64_t t = 0; t < T; ++t) {
    StepOptions o;
    o.record = &steps.traces[static_cast<size_t>(t)];
    e->step(x.data() + t * B * D, steps.delta.data() + t * B * D, steps.state, o);
  }
  expect_bitwise_equal(whole, steps);
  // Recording the trace must not change the results.
  State s = s0;
  std::vector<float> delta(x.size(), std::numeric_limits<float>::quiet_NaN());
  e->decode(x.data(), delta.data(), T, s);
  EXPECT_EQ(0, std::memcmp(delta.data(), whole.delta.data(), delta.size() * sizeof(float)));
  EXPECT_TRUE(s == whole.state);
}

// Decodes a random batch of B and, for each position in `positions`, that sequence alone, and
// expects the same bits: delta, final state and decision trace.
void expect_alone_equals_in_batch(const Weights& w, int64_t B, const std::vector<int64_t>& positions) {
  const Config& cfg = w.cfg;
  const int64_t T = 3, D = cfg.d_model, C = cfg.core_count;
  const State batch0 = random_state(cfg, B, 6);
  const auto xb = decode_inputs(20, T, B, D);
  auto e = unfused(w, true);
  const Decoded rb = decode(*e, xb, T, batch0);
  for (const int64_t pos : positions) {
    SCOPED_TRACE("sequence " + std::to_string(pos) + " of " + std::to_string(B));
    State alone0 = State::init(cfg, 1);
    batch0.copy_sequence_to(pos, alone0, 0);
    std::vector<float> xa(static_cast<size_t>(T * D));
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(xb.begin() + (t * B + pos) * D, D, xa.begin() + t * D);
    const Decoded ra = decode(*e, xa, T, alone0);
    for (int64_t t = 0; t < T; ++t)
      EXPECT_EQ(0, std::memcmp(ra.delta.data() + t * D, rb.delta.data() + (t * B + pos) * D, D * sizeof(float)))
          << "delta of token " << t;
    State extracted = State::init(cfg, 1);
    rb.state.copy_sequence_to(pos, extracted, 0);
    EXPECT_TRUE(extracted == ra.state) << "final state";
    for (int64_t t = 0; t < T; ++t)
      for (int64_t ev = 0; ev < cfg.n_events; ++ev)
        for (int64_t c = 0; c < C; ++c) {
          const auto& tb = rb.traces[static_cast<size_t>(t)];
          const auto& ta = ra.traces[static_cast<size_t>(t)];
          ASSERT_EQ(ta.gate[static_cast<size_t>(ta.index(ev, 0, c))], tb.gate[static_cast<size_t>(tb.index(ev, pos, c))]);
          ASSERT_EQ(ta.slot[static_cast<size_t>(ta.index(ev, 0, c))], tb.slot[static_cast<size_t>(tb.index(ev, pos, c))]);
        }
  }
}

// A sequence's bits must not depend on its batch-mates or on B (the GEMM algorithm is pinned).
TEST(Unfused, SequenceIsBitwiseIdenticalAloneAndInBatchOfFive) {
  for (const char* preset : {"tiny", "default"}) {
    SCOPED_TRACE(preset);
    expect_alone_equals_in_batch(weights_of(preset), 5, {2});
  }
}

// The collapse is one cooperative kernel whose grid is capped at the blocks resident at once
// (at most 8 blocks of 256 threads per SM); each phase strides over its work items. With 4 x SMs + 8
// tiny sequences, every phase has more items than that cap (the pooling phase, the fewest, has
// 2 per sequence), so each block runs several items of each phase, and the sequences at the
// ends and the middle must still come out as they do alone.
TEST(Unfused, CollapseOfABatchWiderThanOneWaveMatchesEachSequenceAlone) {
  const Weights& w = weights_of("tiny");
  ASSERT_EQ(w.cfg.d_model, 128) << "the item counts above assume the tiny preset";
  ASSERT_EQ(w.cfg.core_count, 40) << "the item counts above assume the tiny preset";
  const int64_t B = 4 * query_gpu().sm_count + 8;
  expect_alone_equals_in_batch(w, B, {0, B / 2 + 1, B - 1});
}

// The trace has the right shape and holds real decisions (both gate values occur).
TEST(Unfused, TraceIsRecorded) {
  const Weights& w = weights_of("tiny");
  const int64_t B = 2, T = 2;
  const State s0 = random_state(w.cfg, B, 8);
  auto e = unfused(w, true);
  const Decoded r = decode(*e, decode_inputs(21, T, B, w.cfg.d_model), T, s0);
  ASSERT_EQ(r.traces.size(), static_cast<size_t>(T));
  int64_t open = 0, n = 0;
  for (const Trace& t : r.traces) {
    EXPECT_EQ(t.events, w.cfg.n_events);
    EXPECT_EQ(t.batch, B);
    EXPECT_EQ(t.cores, w.cfg.core_count);
    for (size_t i = 0; i < t.gate.size(); ++i) {
      ASSERT_LE(t.gate[i], 1);
      ASSERT_LE(t.slot[i], 3);
      open += t.gate[i];
      ++n;
    }
  }
  EXPECT_GT(open, 0);
  EXPECT_LT(open, n);
}

// ---- bad input: an error, and the state bitwise unchanged ----

TEST(Unfused, RefusesBadInputAndLeavesStateUnchanged) {
  const Weights& w = weights_of("tiny");
  expect_bad_input_refused([&] { return unfused(w, true); }, w);
}

}  // namespace
}  // namespace swapffn
