// The StatePool of engines that keep their state on the host (the reference): one State of S
// sequences.
#pragma once
#include <cstdint>
#include <vector>

#include "swapffn/config.hpp"
#include "swapffn/state_pool.hpp"

namespace swapffn {

class HostStatePool final : public StatePool {
 public:
  HostStatePool(const Config& cfg, int64_t slots);
  int64_t slots() const override { return state_.batch; }
  void reset(const std::vector<int32_t>& slot_ids) override;
  State get(int32_t slot) const override;
  void set(int32_t slot, const State& one) override;

  // The named slots' state gathered into one State (rows in order), and written back.
  State gather(const std::vector<int32_t>& slot_ids) const;
  void scatter(const State& rows, const std::vector<int32_t>& slot_ids);

 private:
  Config cfg_;
  State state_;
};

}  // namespace swapffn
