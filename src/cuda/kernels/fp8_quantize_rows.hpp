// The fp8 backend's GEMM operand from the bf16 one the event head and the RMSNorm write: each row in
// e4m3 with fp32 scales of the model's scaling (fp8_block_quantize.cuh), bit-identical to
// fp8::quantize_row on the bf16 values.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

// x [rows, k] bf16 -> q [rows, k] e4m3 codes and scales in the X layout of GemmOperands: blocks,
// [k / 128, rows] (the rows innermost); rows, [rows]. k % 128 == 0. With pdl, a programmatic
// dependent of the previous kernel (it waits for it first).
void launch_quantize_rows_e4m3(fp8::Scaling scaling, const __nv_bfloat16* x, int64_t rows, int64_t k, uint8_t* q,
                               float* scales, cudaStream_t stream, bool pdl = false);

}  // namespace swapffn::cuda
