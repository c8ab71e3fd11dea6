#include "swapffn/limits.hpp"

#include <cstdio>
#include <limits>

namespace swapffn {
namespace {

// A zero factor makes the product zero even where a prefix of the others would not fit.
bool has_zero(std::initializer_list<int64_t> factors) {
  for (int64_t f : factors)
    if (f == 0) return true;
  return false;
}

}  // namespace

void require_in_range(int64_t v, int64_t lo, int64_t hi, const std::string& what) {
  SWAPFFN_REQUIRE(v >= lo && v <= hi, what + " = " + std::to_string(v) + " is out of range: must be in [" +
                                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what) {
  const bool zero = has_zero(factors);
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f >= 0 && (zero || !__builtin_mul_overflow(p, f, &p))) continue;
    std::string shown;
    for (int64_t g : factors) shown += (shown.empty() ? "" : " * ") + std::to_string(g);
    SWAPFFN_FAIL(what + " = " + shown + (f < 0 ? " has a negative factor" : " does not fit 64 bits"));
  }
  return zero ? 0 : p;
}

void fail_allocation(const std::string& what, double bytes) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.3g", bytes / double(int64_t{1} << 30));
  SWAPFFN_FAIL("out of host memory: " + what + " needs " + gib + " GiB");
}

int64_t saturating_product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (f < 0) return std::numeric_limits<int64_t>::max();
  if (has_zero(factors)) return 0;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p)) return std::numeric_limits<int64_t>::max();
  return p;
}

int64_t saturating_sum(std::initializer_list<int64_t> terms) {
  int64_t s = 0;
  for (int64_t t : terms)
    if (t < 0 || __builtin_add_overflow(s, t, &s)) return std::numeric_limits<int64_t>::max();
  return s;
}

}  // namespace swapffn
