// Device side of the stream map (SPEC section 3): four 2-bit lanes per core, lane j = physical bank
// of logical slot j. Mirrors lane_of/swap_lanes of include/swapffn/state.hpp.
#pragma once
#include <cstdint>

namespace swapffn::cuda {

__device__ __forceinline__ int map_lane(uint8_t map, int j) { return (map >> (2 * j)) & 3; }

// Swaps lanes 0 and j (j == 0 gives the map back).
__device__ __forceinline__ uint8_t swap_lanes_0_j(uint8_t map, int j) {
  const int l0 = map & 3, lj = (map >> (2 * j)) & 3;
  const int cleared = map & ~(3 | (3 << (2 * j)));
  return static_cast<uint8_t>(cleared | lj | (l0 << (2 * j)));
}

}  // namespace swapffn::cuda
