// Row RMSNorm into a GEMM operand: out[m] = bf16(h[m] * rsqrt(mean(h[m]^2) + eps) * gain), stored as
// bf16 or (the fp8 FFN's) quantised to e4m3 in 1x128 blocks (ffn_operand.hpp).
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/kernels/ffn_operand.hpp"

namespace swapffn::cuda {

// h and out at the first of `rows` rows. e4m3 needs d_model % 128 == 0. With pdl, launched as a
// programmatic dependent of the previous kernel (it waits for it first).
void launch_rmsnorm(const float* h, const float* gain, const FfnOperand& out, int64_t rows, int64_t d_model, float eps,
                    cudaStream_t stream, bool pdl = false);

}  // namespace swapffn::cuda
