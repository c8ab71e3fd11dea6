// The fp8 backend's SwiGLU between the up and the down GEMM: u = silu(gate) * up in fp32 from the up
// GEMM's bf16 output, quantised at once in e4m3 with the scales of the model's scaling
// (fp8_block_quantize.cuh), so u never exists in a wider type in memory.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

// gu [rows, 2 d_ff] bf16, row m holding the gate values [0, d_ff) then the up values [d_ff, 2 d_ff)
// -> q [rows, d_ff] e4m3 codes and scales in the X layout of GemmOperands (blocks: [d_ff / 128,
// rows], the rows innermost; rows: [rows]). silu(g) = g / (1 + expf(-g)), as the bf16 paths compute
// it. d_ff % 128 == 0. With pdl, a programmatic dependent of the previous kernel.
void launch_swiglu_quantize_e4m3(fp8::Scaling scaling, const __nv_bfloat16* gu, int64_t rows, int64_t d_ff,
                                 uint8_t* q, float* scales, cudaStream_t stream, bool pdl = false);

}  // namespace swapffn::cuda
