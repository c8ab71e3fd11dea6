// One event's decisions and swap (SPEC section 4), given the router projection z = rms(h)*g @ router_w^T:
// swap logit s, bank logits l, slot j = argmax l (ties -> lowest), physical bank p = lane_j(map);
// when s > 0 the row h and bank p exchange (h written into RAM rounded to bf16) and lanes 0 and j
// swap (in a slot step a row's RAM and map are its pool slot's, in place: row_state). Records
// gate/slot into the trace when io->gate is set, and optionally writes the next RMSNorm of the
// (new) h as a bf16 GEMM operand.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

struct RouterSelectSwapArgs {
  const float* z;          // [M, R] fp32
  const float* swap_w;     // [R]
  const float* swap_b;     // [1]
  const float* bank_w;     // [R, 4]
  const float* bank_b;     // [4]
  float* h;                // [M, D] fp32, updated in place
  __nv_bfloat16* ram;      // [M, 4, D] (M = B*C rows; ram [B, C, 4, D]): the batch's (row_state)
  uint8_t* stream_map;     // [M]
  const StepIO* io;        // trace destination: io->gate/slot [E, M] of this token, or null; io->pool
  int event;               // index into the trace
  int64_t rows, cores, d_model, d_router;
  const float* norm_gain;      // [D], or null (then norm_out must be null too: no norm)
  __nv_bfloat16* norm_out;     // [M, D] = bf16(rms(h) * norm_gain) after the swap
  float eps;
};

void launch_router_select_swap(const RouterSelectSwapArgs& a, cudaStream_t stream);

}  // namespace swapffn::cuda
