// Shared pieces of the GPU backend tests: cached random weights, a mid-decode state, an engine with
// pinned kernel choices, a decode that poisons its output first, bitwise comparison of whole runs,
// and the batch-invariance and row-group checks the fused backends share.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "swapffn/device.hpp"
#include "swapffn/backends.hpp"
#include "swapffn/error.hpp"
#include "swapffn/random.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::gpu_test {

inline const Weights& weights_of(const std::string& preset) {
  static const Weights tiny = Weights::random(Config::preset("tiny"), 11);
  static const Weights dflt = Weights::random(Config::preset("default"), 12);
  return preset == "tiny" ? tiny : dflt;
}

inline State random_state(const Config& cfg, int64_t batch, uint64_t seed) { return State::random(cfg, batch, seed); }

// Backend `backend` of the fused kind with the kernel choices `kernels` pinned ("" = built in).
inline std::unique_ptr<Engine> fused_engine(const std::string& backend, const Weights& w, bool graph = true,
                                            const std::string& kernels = "") {
  EngineOptions o;
  o.graph = graph;
  o.fused.pinned = parse_fused_choice(kernels);
  return make_engine(backend, w, o);
}

struct Decoded {
  std::vector<float> delta;
  State state;
  std::vector<Trace> traces;
};

// Decodes `tokens` tokens from `initial`; delta is poisoned with NaN first so that an unwritten
// output fails the finiteness check.
inline Decoded decode(Engine& e, const std::vector<float>& x, int64_t tokens, const State& initial) {
  Decoded r{std::vector<float>(x.size(), std::numeric_limits<float>::quiet_NaN()), initial, {}};
  e.decode(x.data(), r.delta.data(), tokens, r.state, &r.traces);
  for (size_t i = 0; i < r.delta.size(); ++i) {
    if (!std::isfinite(r.delta[i])) {
      ADD_FAILURE() << "delta[" << i << "] not written or not finite: " << r.delta[i];
      break;
    }
  }
  return r;
}

inline void expect_bitwise_equal(const Decoded& a, const Decoded& b) {
  ASSERT_EQ(a.delta.size(), b.delta.size());
  EXPECT_EQ(0, std::memcmp(a.delta.data(), b.delta.data(), a.delta.size() * sizeof(float))) << "delta differs";
  EXPECT_TRUE(a.state == b.state) << "final state differs";
  EXPECT_TRUE(a.traces == b.traces) << "decision trace differs";
}

// Bad input to a warmed engine of the tiny model (a captured graph and device state present):
// non-finite x (named by its index, delta untouched), a stream map that is no permutation, a state of
// another config, a trace to follow (GPU engines record, they do not follow): each refused with the
// state bitwise unchanged; after the refusals the engine computes what a fresh one does.
inline void expect_bad_input_refused(const std::function<std::unique_ptr<Engine>()>& make, const Weights& w) {
  const Config& cfg = w.cfg;
  const int64_t B = 2, D = cfg.d_model;
  auto e = make();
  std::vector<float> x = decode_inputs(22, 1, B, D);
  std::vector<float> delta(x.size());
  State s = random_state(cfg, B, 9);
  e->step(x.data(), delta.data(), s);
  const State before = s;

  std::vector<float> bad = x;
  bad[static_cast<size_t>(D + 5)] = std::numeric_limits<float>::infinity();
  std::fill(delta.begin(), delta.end(), 7.f);
  try {
    e->step(bad.data(), delta.data(), s);
    ADD_FAILURE() << "non-finite x accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(std::to_string(D + 5)), std::string::npos) << err.what();
  }
  EXPECT_TRUE(s == before);
  EXPECT_EQ(delta[0], 7.f);
  bad[static_cast<size_t>(D + 5)] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(e->decode(bad.data(), delta.data(), 1, s), Error);
  EXPECT_TRUE(s == before);

  State bad_map = s;
  bad_map.stream_map[3] = 0x00;  // lanes (0,0,0,0): not a permutation
  const State bad_map_before = bad_map;
  EXPECT_THROW(e->step(x.data(), delta.data(), bad_map), Error);
  EXPECT_TRUE(bad_map == bad_map_before);

  State wrong = State::init(Config::preset("default"), 1);  // other cores and d_model
  const State wrong_before = wrong;
  EXPECT_THROW(e->step(x.data(), delta.data(), wrong), Error);
  EXPECT_TRUE(wrong == wrong_before);

  Trace follow;
  follow.resize(cfg.n_events, B, cfg.core_count);
  StepOptions o;
  o.follow = &follow;
  EXPECT_THROW(e->step(x.data(), delta.data(), s, o), Error);
  EXPECT_TRUE(s == before);

  auto fresh = make();
  expect_bitwise_equal(decode(*e, x, 1, before), decode(*fresh, x, 1, before));
}

// A sequence's bits must not depend on its batch-mates or on B: sequence 3 of a batch of B run with
// the choices `batch_kernels` against the same sequence alone with `alone_kernels` (delta of every
// token, final state).
inline void expect_alone_as_in_a_batch(const std::string& backend, const char* preset, int64_t B,
                                       const std::string& batch_kernels, const std::string& alone_kernels) {
  SCOPED_TRACE(backend + " " + preset + " B=" + std::to_string(B) + " batch: " + batch_kernels +
               ", alone: " + alone_kernels);
  const Weights& w = weights_of(preset);
  const int64_t T = preset[0] == 't' ? 3 : 2, D = w.cfg.d_model, pick = 3;
  const State batch_state = random_state(w.cfg, B, 31);
  const auto x = decode_inputs(32, T, B, D);
  const Decoded all = decode(*fused_engine(backend, w, true, batch_kernels), x, T, batch_state);

  State one = State::init(w.cfg, 1);
  batch_state.copy_sequence_to(pick, one, 0);
  std::vector<float> x1(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(&x[static_cast<size_t>((t * B + pick) * D)], D, &x1[static_cast<size_t>(t * D)]);
  const Decoded alone = decode(*fused_engine(backend, w, true, alone_kernels), x1, T, one);

  for (int64_t t = 0; t < T; ++t)
    EXPECT_EQ(0, std::memcmp(&alone.delta[static_cast<size_t>(t * D)], &all.delta[static_cast<size_t>((t * B + pick) * D)],
                             static_cast<size_t>(D) * sizeof(float)))
        << "delta of token " << t << " differs alone vs in the batch";
  State got = State::init(w.cfg, 1);
  all.state.copy_sequence_to(pick, got, 0);
  EXPECT_TRUE(got == alone.state) << "final state differs alone vs in the batch";
}

// Row groups change which rows a launch covers and which stream runs it, never a row's arithmetic:
// the bits of groups=1 for 2, 3 and 8 groups, captured in a graph or run eagerly (`more`: further
// choices, appended to each, e.g. ",fp8up=cublas").
inline void expect_row_groups_bitwise_equal(const std::string& backend, const char* preset, int64_t B, int64_t T,
                                            const std::string& more = "") {
  const Weights& w = weights_of(preset);
  const State s0 = random_state(w.cfg, B, 51);
  const auto x = decode_inputs(52, T, B, w.cfg.d_model);
  const Decoded one = decode(*fused_engine(backend, w, true, "groups=1" + more), x, T, s0);
  for (const char* groups : {"groups=2", "groups=3", "groups=8"}) {
    const std::string kernels = groups + more;
    SCOPED_TRACE(backend + " " + preset + " " + kernels);
    expect_bitwise_equal(one, decode(*fused_engine(backend, w, true, kernels), x, T, s0));
    expect_bitwise_equal(one, decode(*fused_engine(backend, w, false, kernels), x, T, s0));
  }
}

}  // namespace swapffn::gpu_test
