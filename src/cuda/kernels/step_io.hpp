// StepIO: where the current token step reads x and writes delta and the decision trace.
// It lives in device memory so that a captured CUDA graph (which bakes kernel arguments) can be
// replayed for token after token: the step's last kernel (the collapse) advances the pointers to the
// next token.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace swapffn::cuda {

struct StepIO {
  const float* x;  // [B, D] of the current token
  float* delta;    // [B, D] of the current token
  uint8_t* gate;   // [E, B, C] of the current token, or null when the trace is not recorded
  uint8_t* slot;   // [E, B, C], null exactly when gate is
};

// *io = value, in stream order (a kernel argument: nothing on the host has to outlive the call).
void launch_set_step_io(StepIO* io, const StepIO& value, cudaStream_t stream);

}  // namespace swapffn::cuda
