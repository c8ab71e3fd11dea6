// The slots of a state pool that a failed step may have left partly advanced. The GPU engines step
// their pool's slots in place (no copy in or out), so a fault after a step's checks have passed (a
// launch or copy that fails once kernels have run) leaves the named slots in an unknown state. Such
// slots are torn: steps, reads and saves that name them refuse, naming the slot and the fault, until
// the slot is reset or set. Never silently garbage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace swapffn {

class TornSlots {
 public:
  explicit TornSlots(int64_t slots) : torn_(static_cast<size_t>(slots), false) {}
  // Marks the named slots (padding ids skipped) torn by `fault`; every slot when `slot_ids` is null
  // (a step whose ids live on the device).
  void tear(const std::vector<int32_t>* slot_ids, const std::string& fault);
  void mend(int32_t slot);
  // Throws naming the first torn slot among `slot_ids` (padding skipped), or among all slots when
  // `slot_ids` is null.
  void require_whole(const std::vector<int32_t>* slot_ids) const;

 private:
  bool names_slot(int32_t s) const { return s >= 0 && static_cast<size_t>(s) < torn_.size(); }  // not padding

  std::vector<bool> torn_;
  int64_t count_ = 0;  // torn slots: a step's check is free while there are none
  std::string fault_;  // the last fault that tore slots
};

}  // namespace swapffn
