// SwiGLU gating between the FFN GEMMs: u[m, f] = bf16(silu(gate[m, f]) * up[m, f]) in fp32, reading
// the fused w1|w3 GEMM output gu [M, 2F] whose row m holds gate values [0, F) then up values [F, 2F).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace swapffn::cuda {

void launch_swiglu(const __nv_bfloat16* gu, __nv_bfloat16* u, int64_t rows, int64_t d_ff,
                   cudaStream_t stream);

}  // namespace swapffn::cuda
