// The free-running decision flip rate of SPEC section 5 (fp8 paths): two engines each decode the
// same inputs from their own initial state, recording their traces, and per token we count the
// decisions that differ. Unlike the check, neither follows the other, so a flip changes that
// engine's state and may cause more flips later: what a user of the faster engine trades.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "swapffn/engine.hpp"

namespace swapffn {

struct FlipRate {
  std::string engine, baseline;  // the engines' names
  int64_t batch = 0, tokens = 0;
  // Per token: the decisions compared (every gate bit, and the slot where both gates were open)
  // and how many of them differ.
  std::vector<int64_t> decisions, flips;

  double rate(int64_t token) const;  // flips / decisions of one token (0 when none was compared)
  double overall() const;            // over all tokens
  // "0.8% 1.1% ...": each token's rate in percent, one decimal.
  std::string per_token() const;
};

// Decodes decode_inputs(seed, tokens, batch, D) (the inputs `check` uses) with both engines, each
// from State::init, and compares their traces token by token. Throws when the engines' configs
// differ, on bad sizes and on either engine's errors.
FlipRate decision_flip_rate(Engine& engine, Engine& baseline, int64_t batch, int64_t tokens, uint64_t seed);

}  // namespace swapffn
