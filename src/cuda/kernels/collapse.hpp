// Collapse (SPEC section 4, last lines), per sequence b, all in fp32 with fixed summation orders:
//   pooled[k]  = sum_c core_alpha[c, k] * h[b, c]          (cores summed in chunks, chunks in order)
//   zc[r]      = sum_k pooled[k] . collapse_basis[k, r]    (silu when collapse_silu)
//   delta[b]   = collapse_decoder @ zc                      (written to io->delta; zeros for the
//                                                           padding rows of a slot step)
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

struct CollapseArgs {
  const float* h;                   // [B*C, D]
  const float* alpha;               // [C, K]
  const __nv_bfloat16* basis;       // [K, Rc, D]
  const __nv_bfloat16* decoder;     // [D, Rc]
  float* partial;                   // workspace [B, collapse_chunks(C), K, D]
  float* pooled;                    // workspace [B, K, D]
  float* zc;                        // workspace [B, Rc]
  StepIO* io;                       // io->delta: [B, D] out; the pointers advance at the end
  int64_t batch, cores, d_model, collapse_k, collapse_r;
  bool silu;
};

// Number of core chunks summed in parallel (the partial workspace's second dimension).
int64_t collapse_chunks(int64_t cores);

// The collapse, then io->x and io->delta advance by x_stride elements and gate/slot (when set) by
// trace_stride, ready for the next token step of a replayed graph.
void launch_collapse_and_advance(const CollapseArgs& a, int64_t x_stride, int64_t trace_stride, cudaStream_t stream);

}  // namespace swapffn::cuda
