// Copies whole sequences' state between a state pool and an engine's batch buffers (SPEC section 7):
// the gather before a slot step and the scatter after it, one launch each.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

struct SlotCopyArgs {
  const __nv_bfloat16* src_ram;  // [*, row_ram] bf16
  const uint8_t* src_map;        // [*, row_map]
  __nv_bfloat16* dst_ram;
  uint8_t* dst_map;
  // Row r of the copy reads source row src_rows[r] (null: r) and writes destination row
  // dst_rows[r] (null: r).
  const int32_t* src_rows;
  const int32_t* dst_rows;
  int64_t rows, row_ram, row_map;  // row_ram = C * 4 * D elements, row_map = C bytes
};

void launch_slot_copy(const SlotCopyArgs& a, cudaStream_t stream);

}  // namespace swapffn::cuda
