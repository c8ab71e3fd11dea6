// Row RMSNorm into a bf16 GEMM operand: out[m] = bf16(h[m] * rsqrt(mean(h[m]^2) + eps) * gain).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

// With pdl, launched as a programmatic dependent of the previous kernel (it waits for it first).
void launch_rmsnorm_bf16(const float* h, const float* gain, __nv_bfloat16* out, int64_t rows,
                         int64_t d_model, float eps, cudaStream_t stream, bool pdl = false);

}  // namespace swapffn::cuda
