// StatePool: the recurrent state of S sequences held by an engine, on its device (SPEC section 7).
// A step names the slots it reads and writes; no other slot changes. A sequence joins by a reset
// or a set of its slot and leaves by no longer being named.
#pragma once
#include <cstdint>
#include <vector>

#include "swapffn/state.hpp"

namespace swapffn {

inline constexpr int32_t kPaddingSlot = -1;  // a step row that computes nothing that is kept

class StatePool {
 public:
  virtual ~StatePool() = default;
  virtual int64_t slots() const = 0;
  // SPEC section 3's initial state in each named slot (distinct, in [0, S)).
  virtual void reset(const std::vector<int32_t>& slot_ids) = 0;
  // One slot's state, as a State of one sequence.
  virtual State get(int32_t slot) const = 0;
  // Replaces one slot's state with `one` (one sequence of this pool's shape, validated first: on an
  // error the pool is unchanged).
  virtual void set(int32_t slot, const State& one) = 0;
};

// The non-padding rows of a slot step, in order (what a step over them computes and its trace holds):
// their slots and their rows of x [B, D].
struct NamedRows {
  std::vector<int32_t> slots;
  std::vector<float> x;
};
NamedRows named_rows(const float* x, const std::vector<int32_t>& slot_ids, int64_t d_model);
// delta [B, D] of the whole step from the named rows' delta: zero in every padding row.
void spread_named_deltas(const std::vector<float>& named_delta, const std::vector<int32_t>& slot_ids, int64_t d_model,
                         float* delta);

// Throws naming the first slot id that is out of [0, slots) (and not kPaddingSlot when padding is
// allowed) or named twice.
void check_slot_ids(const std::vector<int32_t>& slot_ids, int64_t slots, bool allow_padding);

}  // namespace swapffn
