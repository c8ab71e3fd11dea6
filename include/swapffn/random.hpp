// Portable deterministic random numbers: the same seed gives the same values on every platform and
// build (integer generator; normals by Box-Muller in double, rounded to float). Used for decode
// inputs x in `swapffn run` / `swapffn check` and the agreement check, so a seed names the inputs.
#pragma once
#include <cstdint>
#include <vector>

namespace swapffn {

// xoshiro256** seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits
  float normal();    // N(0, 1)

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0;
};

// Mixes two values into one seed (e.g. a run's seed and a token index), so streams don't overlap.
uint64_t mix_seed(uint64_t a, uint64_t b);

// The decode input of token `token`: x [batch, d_model] ~ N(0,1), drawn from a stream of its own
// (seed, token), so token t's input is the same whatever the number of tokens decoded.
std::vector<float> token_inputs(uint64_t seed, int64_t token, int64_t batch, int64_t d_model);
// token_inputs of tokens 0..tokens-1 concatenated: x [tokens, batch, d_model].
std::vector<float> decode_inputs(uint64_t seed, int64_t tokens, int64_t batch, int64_t d_model);

}  // namespace swapffn
