// Core broadcast (SPEC section 4, first line): h[b, c] = x[b] * core_scale[c] + core_shift[c] in fp32
// (one fused multiply-add per element, as the folded event router's own broadcast does), optionally
// followed by the first router RMSNorm of the row (saves a pass over h).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

struct CoreFilmArgs {
  const StepIO* io;      // io->x: [B, D] fp32
  const float* scale;    // [C, D]
  const float* shift;    // [C, D]
  float* h;              // [B*C, D] fp32 out
  int64_t batch, cores, d_model;
  const float* norm_gain;      // [D], or null (then norm_out must be null too: no norm)
  __nv_bfloat16* norm_out;     // [B*C, D] = bf16(rms(h) * norm_gain)
  float eps;
};

void launch_core_film(const CoreFilmArgs& a, cudaStream_t stream);

}  // namespace swapffn::cuda
