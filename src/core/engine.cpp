// The parts of the engine interface shared by every backend.
#include "swapffn/engine.hpp"

#include <cmath>
#include <cstdio>

#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

void Trace::resize(int64_t e, int64_t b, int64_t c) {
  const int64_t n = checked_product({e, b, c}, "trace entries E*B*C");
  std::vector<uint8_t> g, s;  // the trace is unchanged when an allocation fails
  allocate(g, n, uint8_t{0}, "a decision trace (gate [E, B, C])");
  allocate(s, n, uint8_t{0}, "a decision trace (slot [E, B, C])");
  events = e;
  batch = b;
  cores = c;
  gate.swap(g);
  slot.swap(s);
}

void Engine::decode(const float* x, float* delta, int64_t tokens, State& state,
                    std::vector<Trace>* record) {
  require_in_range(tokens, 0, kMaxTokens, "decode tokens");
  state.validate();
  const int64_t n = checked_product({state.batch, config().d_model}, "decode step B*D");
  check_input_values(x, checked_product({tokens, n}, "decode inputs T*B*D"), "x");
  if (record) record->assign(static_cast<size_t>(tokens), Trace{});
  for (int64_t t = 0; t < tokens; ++t) {
    StepOptions opt;
    if (record) opt.record = &(*record)[static_cast<size_t>(t)];
    step(x + t * n, delta + t * n, state, opt);
  }
}

namespace {

std::string shortest(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

}  // namespace

void check_input_values(const float* x, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    SWAPFFN_REQUIRE(std::isfinite(x[i]), std::string("non-finite value in ") + what + " at index " +
                                             std::to_string(i) + " (" + shortest(x[i]) + ")");
    SWAPFFN_REQUIRE(std::fabs(x[i]) <= kMaxValueMagnitude,
                    std::string("value out of range in ") + what + " at index " + std::to_string(i) + " (" +
                        shortest(x[i]) + "): the engines accept magnitudes up to 2^32 (SPEC section 4)");
  }
}

}  // namespace swapffn
