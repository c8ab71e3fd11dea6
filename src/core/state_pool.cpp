// Slot ids, the host pool, and the engine's default slot step: gather the named slots into a State
// of the non-padding rows, step it, scatter it back (engines with a device pool override this).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/host_state_pool.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn {

void check_slot_ids(const std::vector<int32_t>& slot_ids, int64_t slots, bool allow_padding) {
  require_in_range(static_cast<int64_t>(slot_ids.size()), 0, kMaxBatch, "rows in one slot step (slot_ids.size())");
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(slots, 0)), false);
  for (size_t b = 0; b < slot_ids.size(); ++b) {
    const int32_t s = slot_ids[b];
    if (allow_padding && s == kPaddingSlot) continue;
    SWAPFFN_REQUIRE(s >= 0 && s < slots, "slot_ids[" + std::to_string(b) + "] = " + std::to_string(s) +
                                             " is not a slot of this pool (0.." + std::to_string(slots - 1) +
                                             (allow_padding ? ", or -1 for padding)" : ")"));
    SWAPFFN_REQUIRE(!seen[static_cast<size_t>(s)],
                    "slot_ids[" + std::to_string(b) + "] = " + std::to_string(s) + " is named twice in one step");
    seen[static_cast<size_t>(s)] = true;
  }
}

HostStatePool::HostStatePool(const Config& cfg, int64_t slots) : cfg_(cfg), state_(State::init(cfg, slots)) {}

void HostStatePool::reset(const std::vector<int32_t>& slot_ids) {
  check_slot_ids(slot_ids, slots(), false);
  const State fresh = State::init(cfg_, 1);
  for (int32_t s : slot_ids) fresh.copy_sequence_to(0, state_, s);
}

State HostStatePool::get(int32_t slot) const { return gather({slot}); }

void HostStatePool::set(int32_t slot, const State& one) {
  check_slot_ids({slot}, slots(), false);
  one.check_matches(cfg_, 1);
  one.check_ram_values();
  one.copy_sequence_to(0, state_, slot);
}

State HostStatePool::gather(const std::vector<int32_t>& slot_ids) const {
  check_slot_ids(slot_ids, slots(), false);
  State out = State::init(cfg_, std::max<int64_t>(1, int64_t(slot_ids.size())));
  out.batch = int64_t(slot_ids.size());
  out.ram.resize(size_t(out.batch * out.cores * 4 * out.d_model));
  out.stream_map.resize(size_t(out.batch * out.cores));
  for (size_t b = 0; b < slot_ids.size(); ++b) state_.copy_sequence_to(slot_ids[b], out, int64_t(b));
  return out;
}

void HostStatePool::scatter(const State& rows, const std::vector<int32_t>& slot_ids) {
  for (size_t b = 0; b < slot_ids.size(); ++b) rows.copy_sequence_to(int64_t(b), state_, slot_ids[b]);
}

NamedRows named_rows(const float* x, const std::vector<int32_t>& slot_ids, int64_t d_model) {
  NamedRows out;
  for (size_t b = 0; b < slot_ids.size(); ++b)
    if (slot_ids[b] != kPaddingSlot) {
      out.slots.push_back(slot_ids[b]);
      out.x.insert(out.x.end(), x + int64_t(b) * d_model, x + int64_t(b + 1) * d_model);
    }
  return out;
}

void spread_named_deltas(const std::vector<float>& named_delta, const std::vector<int32_t>& slot_ids, int64_t d_model,
                         float* delta) {
  for (size_t b = 0, r = 0; b < slot_ids.size(); ++b) {
    float* out = delta + int64_t(b) * d_model;
    if (slot_ids[b] == kPaddingSlot)
      std::fill(out, out + d_model, 0.f);
    else
      std::copy_n(named_delta.data() + int64_t(r++) * d_model, d_model, out);
  }
}

std::unique_ptr<StatePool> Engine::make_pool(int64_t slots) {
  require_in_range(slots, 1, kMaxBatch, "state pool slots");
  return std::make_unique<HostStatePool>(config(), slots);
}

void Engine::step_slots(const float* x, const std::vector<int32_t>& slot_ids, float* delta, StatePool& pool,
                        const StepOptions& opt) {
  auto* host = dynamic_cast<HostStatePool*>(&pool);
  SWAPFFN_REQUIRE(host != nullptr, "backend '" + name() + "': the state pool was made by another engine");
  check_slot_ids(slot_ids, pool.slots(), true);
  const int64_t D = config().d_model, B = int64_t(slot_ids.size());
  check_input_values(x, B * D, "x");
  const NamedRows rows = named_rows(x, slot_ids, D);
  std::vector<float> delta_rows(rows.x.size());
  if (!rows.slots.empty()) {
    State state = host->gather(rows.slots);
    step(rows.x.data(), delta_rows.data(), state, opt);
    host->scatter(state, rows.slots);
  }
  spread_named_deltas(delta_rows, slot_ids, D, delta);
}

}  // namespace swapffn
