#include "swapffn/torn_slots.hpp"

#include "swapffn/error.hpp"

namespace swapffn {

void TornSlots::tear(const std::vector<int32_t>* slot_ids, const std::string& fault) {
  fault_ = fault;
  if (slot_ids == nullptr) {
    torn_.assign(torn_.size(), true);
    count_ = static_cast<int64_t>(torn_.size());
    return;
  }
  for (int32_t s : *slot_ids)
    if (names_slot(s) && !torn_[static_cast<size_t>(s)]) {
      torn_[static_cast<size_t>(s)] = true;
      ++count_;
    }
}

void TornSlots::mend(int32_t slot) {
  if (names_slot(slot) && torn_[static_cast<size_t>(slot)]) {
    torn_[static_cast<size_t>(slot)] = false;
    --count_;
  }
}

void TornSlots::require_whole(const std::vector<int32_t>* slot_ids) const {
  if (count_ == 0) return;
  const auto refuse = [&](int32_t s) {
    SWAPFFN_FAIL("slot " + std::to_string(s) + " may be partly advanced: a step on it failed after it had started (" +
                 fault_ + "); reset or set the slot first");
  };
  if (slot_ids == nullptr) {
    for (size_t s = 0; s < torn_.size(); ++s)
      if (torn_[s]) refuse(static_cast<int32_t>(s));
    return;
  }
  for (int32_t s : *slot_ids)
    if (names_slot(s) && torn_[static_cast<size_t>(s)]) refuse(s);
}

}  // namespace swapffn
