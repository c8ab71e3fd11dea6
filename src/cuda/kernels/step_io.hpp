// StepIO: where the current token step reads x and writes delta and the decision trace, and, in a
// slot step, which pool slots hold its rows' state.
// It lives in device memory so that a captured CUDA graph (which bakes kernel arguments) can be
// replayed for token after token and for any pool and slot ids: the step's last kernel (the
// collapse) advances the x, delta and trace pointers to the next token.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

// The pool slots of a slot step (SPEC section 7): row b's state is slot ids[b] of the pool; an id
// outside [0, slots) marks a padding row. ids is null in a dense step.
struct SlotSource {
  __nv_bfloat16* ram;   // [slots, C, 4, D]
  uint8_t* map;         // [slots, C]
  const int32_t* ids;   // [B]
  int64_t slots;
};

struct StepIO {
  const float* x;  // [B, D] of the current token
  float* delta;    // [B, D] of the current token
  uint8_t* gate;   // [E, B, C] of the current token, or null when the trace is not recorded
  uint8_t* slot;   // [E, B, C], null exactly when gate is
  SlotSource pool;
};

#ifdef __CUDACC__
// Whether row b of a slot step is padding (its delta is zero and it changes no slot).
__device__ __forceinline__ bool is_padding_row(const SlotSource& pool, int64_t b) {
  if (pool.ids == nullptr) return false;
  const int32_t s = pool.ids[b];
  return s < 0 || s >= pool.slots;
}

// Where row m (= b * cores + c) of a step keeps its state: a non-padding row of a slot step in its
// pool slot, addressed in place (no copy in or out); a dense step's row, and a padding row, in the
// engine's batch buffers (ram [M, 4, D], map [M]). ram: the row's four banks [4, D]; map: its
// stream map entry.
struct RowState {
  __nv_bfloat16* ram;
  uint8_t* map;
};
__device__ __forceinline__ RowState row_state(const SlotSource& pool, __nv_bfloat16* batch_ram, uint8_t* batch_map,
                                              int64_t m, int64_t cores, int64_t d_model) {
  if (pool.ids == nullptr || is_padding_row(pool, m / cores)) return {batch_ram + m * 4 * d_model, batch_map + m};
  const int64_t r = int64_t(pool.ids[m / cores]) * cores + m % cores;
  return {pool.ram + r * 4 * d_model, pool.map + r};
}
#endif

// *io = value, in stream order (a kernel argument: nothing on the host has to outlive the call).
void launch_set_step_io(StepIO* io, const StepIO& value, cudaStream_t stream);

}  // namespace swapffn::cuda
