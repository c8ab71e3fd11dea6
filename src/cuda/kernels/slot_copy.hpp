// Whole sequences' state moved between a state pool and an engine's batch buffers (SPEC section 7):
// the gather before a slot step and the scatter after it, one launch each. A row whose slot id is
// outside [0, slots) is padding: the gather gives it the initial state (zeros, identity maps), the
// scatter writes no slot and zeros its delta row.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

struct SlotRows {
  __nv_bfloat16* pool_ram;  // [slots, row_ram]
  uint8_t* pool_map;        // [slots, row_map]
  int64_t slots;
  __nv_bfloat16* batch_ram;  // [rows, row_ram]
  uint8_t* batch_map;        // [rows, row_map]
  const int32_t* slot_ids;   // [rows], device
  int64_t rows, row_ram, row_map;  // row_ram = C * 4 * D elements, row_map = C bytes
};

void launch_gather_slots(const SlotRows& a, cudaStream_t stream);
// delta [rows, d_model]: the padding rows' delta is zeroed.
void launch_scatter_slots(const SlotRows& a, float* delta, int64_t d_model, cudaStream_t stream);

}  // namespace swapffn::cuda
