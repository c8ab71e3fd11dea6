// The StatePool of the GPU engines: S sequences' RAM and stream maps in device memory, reset, read
// and written per slot; a slot step's kernels address the named slots in place (row_state, step_io.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/bf16.hpp"
#include "swapffn/config.hpp"
#include "swapffn/state_pool.hpp"
#include "swapffn/torn_slots.hpp"

namespace swapffn::cuda {

class DeviceStatePool final : public StatePool {
 public:
  // `owner` identifies the engine that made the pool (its slot steps refuse other engines' pools);
  // made on `device`, where reset, get and set run (the caller's current device restored after).
  DeviceStatePool(const Config& cfg, int64_t slots, const void* owner, int device);
  int64_t slots() const override { return slots_; }
  void reset(const std::vector<int32_t>& slot_ids) override;
  State get(int32_t slot) const override;
  void set(int32_t slot, const State& one) override;

  const void* owner() const { return owner_; }
  bf16* ram() const { return ram_.get(); }          // [S, C, 4, D]
  uint8_t* stream_map() const { return map_.get(); }  // [S, C]
  int64_t row_ram() const { return cfg_.core_count * 4 * cfg_.d_model; }
  int64_t row_map() const { return cfg_.core_count; }
  // Slots a failed step may have left partly advanced (slot steps run in place): reset and set mend
  // them, get refuses them, and the engines' slot steps check and tear them.
  TornSlots& torn() { return torn_; }

 private:
  Config cfg_;
  int64_t slots_;
  const void* owner_;
  int device_;
  DeviceBuffer<bf16> ram_;
  DeviceBuffer<uint8_t> map_;
  TornSlots torn_;
};

}  // namespace swapffn::cuda
