#include "swapffn/random.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "swapffn/limits.hpp"

namespace swapffn {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& w : s_) w = splitmix64(seed);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

float Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return static_cast<float>(spare_);
  }
  const double u1 = static_cast<double>((next_u64() >> 11) + 1) * 0x1.0p-53;  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double a = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(a);
  has_spare_ = true;
  return static_cast<float>(r * std::cos(a));
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a;
  const uint64_t h = splitmix64(x);
  x = h ^ b;
  return splitmix64(x);
}

std::vector<float> token_inputs(uint64_t seed, int64_t token, int64_t batch, int64_t d_model) {
  Rng rng(mix_seed(seed, static_cast<uint64_t>(token)));
  std::vector<float> x;
  allocate(x, checked_product({batch, d_model}, "token inputs B*D"), 0.0f, "the inputs x of one token");
  for (auto& v : x) v = rng.normal();
  return x;
}

std::vector<float> decode_inputs(uint64_t seed, int64_t tokens, int64_t batch, int64_t d_model) {
  const int64_t n = checked_product({batch, d_model}, "token inputs B*D");
  std::vector<float> x;
  allocate(x, checked_product({tokens, n}, "decode inputs T*B*D"), 0.0f,
           "the inputs x [T, B, D] of " + std::to_string(tokens) + " tokens");
  for (int64_t t = 0; t < tokens; ++t) {
    const auto xt = token_inputs(seed, t, batch, d_model);
    std::copy(xt.begin(), xt.end(), x.begin() + t * n);
  }
  return x;
}

}  // namespace swapffn
