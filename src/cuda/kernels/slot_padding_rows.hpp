// The padding rows of a slot step (SPEC section 7): a slot step's rows address their pool slots in
// place (row_state, step_io.hpp), but a padding row has no slot; it runs on the engine's batch
// buffers, which this launch sets to the initial state (zeros, identity maps) before the step, so
// that a padding row computes on defined values and its zero delta and untouched slots do not depend
// on what earlier steps left there. The slot ids come from the step's StepIO (io->pool), so the
// launch sits in the step's captured graph; the blocks of a non-padding row return at once.
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

void launch_init_padding_rows(const StepIO* io, const SlotRows& a, cudaStream_t stream);

}  // namespace swapffn::cuda
