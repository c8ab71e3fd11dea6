// Router projection straight from the fp32 state: z[m] = bf16(rms(h[m]) * router_norm) @ router_w^T.
// Replaces an RMSNorm pass plus a skinny GEMM (N = d_router = 64) with one kernel: each CTA
// normalises 16 rows into shared memory and its warps run tensor-core MMAs (m16n8k16) over the
// router weights, which stay in L2. Fixed summation order per row: deterministic, batch invariant.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

struct RouterProjectArgs {
  const float* h;                 // [M, D] fp32
  const float* gain;              // [D] router_norm
  const __nv_bfloat16* router_w;  // [R, D]
  float* z;                       // [M, R] fp32 out
  int64_t rows, d_model, d_router;
  float eps;
};

// Throws unless D % 16 == 0 and R % 8 == 0 (the MMA shape) and D fits the shared-memory limit.
void check_router_project_shape(int64_t d_model, int64_t d_router);
void launch_router_project(const RouterProjectArgs& a, cudaStream_t stream);

}  // namespace swapffn::cuda
