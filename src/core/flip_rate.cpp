// decision_flip_rate: two engines decoding freely, their decisions compared token by token.
#include "swapffn/flip_rate.hpp"

#include <cstdio>

#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"
#include "swapffn/random.hpp"

namespace swapffn {

double FlipRate::rate(int64_t token) const {
  const auto t = static_cast<size_t>(token);
  return decisions.at(t) ? static_cast<double>(flips.at(t)) / static_cast<double>(decisions.at(t)) : 0.0;
}

double FlipRate::overall() const {
  int64_t d = 0, f = 0;
  for (size_t t = 0; t < decisions.size(); ++t) {
    d += decisions[t];
    f += flips[t];
  }
  return d ? static_cast<double>(f) / static_cast<double>(d) : 0.0;
}

std::string FlipRate::per_token() const {
  std::string s;
  char buf[32];
  for (int64_t t = 0; t < tokens; ++t) {
    std::snprintf(buf, sizeof buf, "%s%.1f%%", t ? " " : "", 100.0 * rate(t));
    s += buf;
  }
  return s;
}

namespace {

// Decodes from the initial state, returning the T traces.
std::vector<Trace> free_run(Engine& e, const std::vector<float>& x, int64_t batch, int64_t tokens) {
  State state = State::init(e.config(), batch);
  std::vector<float> delta;
  allocate(delta, checked_product({tokens, batch, e.config().d_model}, "flip rate: T*B*D"), 0.0f,
           "flip rate: the outputs delta [T, B, D]");
  std::vector<Trace> traces;
  e.decode(x.data(), delta.data(), tokens, state, &traces);
  SWAPFFN_REQUIRE(static_cast<int64_t>(traces.size()) == tokens,
                  "flip rate: engine '" + e.name() + "' recorded " + std::to_string(traces.size()) + " traces for " +
                      std::to_string(tokens) + " tokens");
  return traces;
}

}  // namespace

FlipRate decision_flip_rate(Engine& engine, Engine& baseline, int64_t batch, int64_t tokens, uint64_t seed) {
  require_in_range(batch, 1, kMaxBatch, "flip rate: batch");
  require_in_range(tokens, 1, kMaxTokens, "flip rate: tokens");
  SWAPFFN_REQUIRE(engine.config() == baseline.config(), "flip rate: engines '" + engine.name() + "' and '" +
                                                            baseline.name() + "' run different configs");
  const std::vector<float> x = decode_inputs(seed, tokens, batch, engine.config().d_model);
  const std::vector<Trace> a = free_run(engine, x, batch, tokens), b = free_run(baseline, x, batch, tokens);

  FlipRate r;
  r.engine = engine.name();
  r.baseline = baseline.name();
  r.batch = batch;
  r.tokens = tokens;
  for (int64_t t = 0; t < tokens; ++t) {
    const Trace &ta = a[static_cast<size_t>(t)], &tb = b[static_cast<size_t>(t)];
    SWAPFFN_REQUIRE(ta.gate.size() == tb.gate.size() && ta.slot.size() == ta.gate.size() &&
                        tb.slot.size() == tb.gate.size(),
                    "flip rate: the engines' traces of token " + std::to_string(t) + " differ in size");
    int64_t decisions = 0, flips = 0;
    for (size_t i = 0; i < ta.gate.size(); ++i) {
      ++decisions;
      flips += ta.gate[i] != tb.gate[i];
      if (ta.gate[i] && tb.gate[i]) {
        ++decisions;
        flips += ta.slot[i] != tb.slot[i];
      }
    }
    r.decisions.push_back(decisions);
    r.flips.push_back(flips);
  }
  return r;
}

}  // namespace swapffn
