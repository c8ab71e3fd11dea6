#include "cuda/common/device_state_pool.hpp"

#include "cuda/runtime/device_guard.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn::cuda {
namespace {

int64_t checked_slots(int64_t slots) {
  require_in_range(slots, 1, kMaxBatch, "state pool slots");
  return slots;
}

}  // namespace

DeviceStatePool::DeviceStatePool(const Config& cfg, int64_t slots, const void* owner, int device)
    : cfg_(cfg), slots_(checked_slots(slots)), owner_(owner), device_(device), torn_(slots_) {
  const DeviceGuard on_device(device_);
  ram_.resize(size_t(slots * row_ram()));
  map_.resize(size_t(slots * row_map()));
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) all[size_t(s)] = int32_t(s);
  reset(all);
}

// The engines step a pool on their own or their caller's streams: reset, get and set first wait for
// every stream of the device, so that they never race a step in flight (they are not the hot path).
void DeviceStatePool::reset(const std::vector<int32_t>& slot_ids) {
  check_slot_ids(slot_ids, slots_, false);
  const DeviceGuard on_device(device_);
  CUDA_CHECK(cudaDeviceSynchronize());
  try {
    for (int32_t s : slot_ids) {  // zeros in RAM, identity maps (SPEC section 3)
      CUDA_CHECK(cudaMemset(ram_.get() + s * row_ram(), 0, size_t(row_ram()) * sizeof(bf16)));
      CUDA_CHECK(cudaMemset(map_.get() + s * row_map(), kIdentityStreamMap, size_t(row_map())));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {  // some slots may be half reset
    torn_.tear(&slot_ids, e.what());
    throw;
  }
  for (int32_t s : slot_ids) torn_.mend(s);
}

State DeviceStatePool::get(int32_t slot) const {
  check_slot_ids({slot}, slots_, false);
  const DeviceGuard on_device(device_);
  const std::vector<int32_t> one_slot{slot};
  torn_.require_whole(&one_slot);
  State one = State::init(cfg_, 1);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(one.ram.data(), ram_.get() + slot * row_ram(), one.ram.size() * sizeof(bf16),
                        cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(one.stream_map.data(), map_.get() + slot * row_map(), one.stream_map.size(),
                        cudaMemcpyDeviceToHost));
  return one;
}

void DeviceStatePool::set(int32_t slot, const State& one) {
  check_slot_ids({slot}, slots_, false);
  const DeviceGuard on_device(device_);
  one.check_matches(cfg_, 1);
  one.check_ram_values();
  CUDA_CHECK(cudaDeviceSynchronize());
  try {
    CUDA_CHECK(cudaMemcpy(ram_.get() + slot * row_ram(), one.ram.data(), one.ram.size() * sizeof(bf16),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(map_.get() + slot * row_map(), one.stream_map.data(), one.stream_map.size(),
                          cudaMemcpyHostToDevice));
  } catch (const std::exception& e) {  // the slot may be half written
    const std::vector<int32_t> one_slot{slot};
    torn_.tear(&one_slot, e.what());
    throw;
  }
  torn_.mend(slot);
}

}  // namespace swapffn::cuda
