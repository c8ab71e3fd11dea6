// Shared pieces of the GPU backend tests: cached random weights, a mid-decode state,
// a decode that poisons its output first, and bitwise comparison of whole runs.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "swapffn/device.hpp"
#include "swapffn/backends.hpp"
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

}  // namespace swapffn::gpu_test
