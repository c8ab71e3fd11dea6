// Upper bounds on the sizes a caller may ask for, and size arithmetic that cannot overflow silently.
// docs/FORMATS.md ("Limits") states the same numbers.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "swapffn/error.hpp"

namespace swapffn {

// Sequences in one step or state, and slots in one pool: 64x the largest batch the GPU engines are
// tuned for (1024), and slot ids stay far inside int32.
inline constexpr int64_t kMaxBatch = int64_t{1} << 16;
// Tokens in one decode call or run.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;
// CPU threads of the reference.
inline constexpr int64_t kMaxThreads = 1024;
// The largest magnitudes the engines accept (SPEC section 4): x within 2^32, RAM within 2^48 (room
// for core_scale and the residual's growth on what x puts there); D * (2^48)^2 <= 2^116 keeps every
// fp32 sum of squares far from overflow (2^128) for any D <= 2^20.
inline constexpr float kMaxValueMagnitude = 4294967296.0f;   // 2^32
inline constexpr float kMaxRamMagnitude = 281474976710656.0f;  // 2^48

// Throws "<what> = <v> is out of range: must be in [lo, hi]" unless lo <= v <= hi.
void require_in_range(int64_t v, int64_t lo, int64_t hi, const std::string& what);

// The product of non-negative sizes; throws naming `what` when a factor is negative or the product
// does not fit int64.
int64_t checked_product(std::initializer_list<int64_t> factors, const std::string& what);

// The product of non-negative sizes, or INT64_MAX when it does not fit: for comparing against a
// budget, where "too large to count" is simply over it.
int64_t saturating_product(std::initializer_list<int64_t> factors);
int64_t saturating_sum(std::initializer_list<int64_t> terms);

// Throws "out of host memory: <what> needs <bytes> GiB".
[[noreturn]] void fail_allocation(const std::string& what, double bytes);

// v.assign(n, value), turning a failed allocation into an error that names `what` and its size.
template <class T>
void allocate(std::vector<T>& v, int64_t n, const T& value, const std::string& what) {
  SWAPFFN_REQUIRE(n >= 0, what + ": negative element count " + std::to_string(n));
  try {
    v.assign(static_cast<size_t>(n), value);
  } catch (const std::bad_alloc&) {
    fail_allocation(what, static_cast<double>(n) * sizeof(T));
  } catch (const std::length_error&) {  // more elements than the vector can index
    fail_allocation(what, static_cast<double>(n) * sizeof(T));
  }
}

}  // namespace swapffn
