// Host side of the fused backend's FFN up-projection: u = silu(A W1^T) * (A W3^T) in one Hopper
// GEMM (sm90_bf16_gemm.cuh's mainloop with a SwiGLU epilogue), launched as a programmatic dependent
// of the previous kernel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "swapffn/bf16.hpp"
#include "swapffn/fused_options.hpp"

namespace swapffn::cuda {

// u[M, F] = silu(A W1^T) * (A W3^T), with W13 the interleaved [2F, K] weights (interleave_w13).
struct DualGemmSwigluArgs {
  const __nv_bfloat16* a;    // [M, K]
  const __nv_bfloat16* w13;  // [2F, K]
  __nv_bfloat16* u;          // [M, F]
  int m, n2, k;              // n2 = 2F
};

// Encodes the tensor maps (cheap host work) and checks the shapes against the tile.
void launch_dual_gemm_swiglu(const DualGemmSwigluArgs& a, DualGemmTile tile, cudaStream_t stream);

// The dual GEMM's B operand: w1 [F, K] and w3 [F, K] interleaved in blocks of 8 rows into [2F, K]
// (rows 16g..16g+7 = w1[8g..8g+7], rows 16g+8..16g+15 = w3[8g..8g+7]). F must be a multiple of 8.
std::vector<bf16> interleave_w13(const std::vector<bf16>& w1, const std::vector<bf16>& w3, int64_t f, int64_t k);

}  // namespace swapffn::cuda
