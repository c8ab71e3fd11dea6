// Host-side bfloat16: storage type plus exact conversions (round-to-nearest-even on narrowing,
// NaN kept quiet). Used by the reference, file I/O and state; the GPU paths use __nv_bfloat16,
// which has the same bit layout.
#pragma once
#include <cstdint>
#include <cstring>

namespace swapffn {

struct bf16 {
  uint16_t bits = 0;
  bool operator==(const bf16&) const = default;
};
static_assert(sizeof(bf16) == 2, "bf16 must be two bytes so arrays of it match the file format");

inline float bf16_to_float(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                               // round to nearest even
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// fp32 -> bf16 -> fp32: what a value becomes once written into bf16 storage.
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace swapffn
