// Whole sequences' state moved between a state pool and an engine's batch buffers (SPEC section 7):
// the gather before a slot step and the scatter after it, one launch each. The pool and the slot
// ids come from the step's StepIO (io->pool), so both launches can sit in the step's captured graph
// and serve any pool and any slot ids of its batch size. A padding row (is_padding_row) gets the
// initial state (zeros, identity maps) from the gather and writes no slot in the scatter.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

// The engine's side: its batch buffers, fixed for a batch size.
struct SlotRows {
  __nv_bfloat16* batch_ram;  // [rows, row_ram]
  uint8_t* batch_map;        // [rows, row_map]
  int64_t rows, row_ram, row_map;  // row_ram = C * 4 * D elements, row_map = C bytes
};

void launch_gather_slots(const StepIO* io, const SlotRows& a, cudaStream_t stream);
void launch_scatter_slots(const StepIO* io, const SlotRows& a, cudaStream_t stream);

}  // namespace swapffn::cuda
