// The scalar building blocks of SPEC section 4 as the reference computes them: fp32 values, dot
// products and means accumulated in double in a fixed order (so results never depend on threading).
// Kept in a header of their own so the spec unit tests can exercise each one directly.
#pragma once
#include <cmath>
#include <cstdint>

#include "swapffn/bf16.hpp"

namespace swapffn::reference {

// sum_i a[i] * b[i] in double. Eight interleaved partial sums combined in a fixed order: the same
// inputs always give the same bits, and the compiler can vectorise the loop.
inline double dot(const float* a, const float* b, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(a[i + k]) * static_cast<double>(b[i + k]);
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail;
}

// out = rms(v) * gain with rms(v) = v * rsqrt(mean(v*v) + eps), the mean taken in double.
inline void rms_norm(const float* v, const float* gain, int64_t n, double eps, float* out) {
  const double inv = 1.0 / std::sqrt(dot(v, v, n) / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(static_cast<double>(v[i]) * inv * static_cast<double>(gain[i]));
}

// silu(t) = t * sigmoid(t), evaluated in double (exp(-t) overflowing to inf gives -0, as it should).
inline float silu(float t) {
  const double d = t;
  return static_cast<float>(d / (1.0 + std::exp(-d)));
}

// The swap gate: open when s > 0 (sigmoid(s) > 0.5); s == 0 keeps it closed.
inline bool gate_open(float s) { return s > 0.0f; }

// argmax over the four bank logits, ties to the lowest slot, and the top-1 minus top-2 gap.
struct SlotChoice {
  int slot = 0;
  float gap = 0;
};
inline SlotChoice choose_slot(const float logits[4]) {
  int best = 0;
  for (int k = 1; k < 4; ++k)
    if (logits[k] > logits[best]) best = k;
  float second = -INFINITY;
  for (int k = 0; k < 4; ++k)
    if (k != best && logits[k] > second) second = logits[k];
  return {best, logits[best] - second};
}

// (h, bank) = (float(bank), bf16(h)): the bank is bf16 storage, so writing rounds and reading widens.
inline void exchange_with_bank(float* h, bf16* bank, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const bf16 out = float_to_bf16(h[i]);
    h[i] = bf16_to_float(bank[i]);
    bank[i] = out;
  }
}

}  // namespace swapffn::reference
