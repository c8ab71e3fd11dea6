// The fused backend's down GEMM h (+)= u W2^T through CUTLASS's sm90 kernels
// (sm90_bf16_gemm_residual_cutlass.cu says why). Variants are named by schedule, tile and cluster:
// pp_64x64_c1x2 = pingpong consumers, 64 x 64 tiles, clusters of 1 x 2 CTAs (M x N).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/kernels/sm90_gemm_launch.hpp"

namespace swapffn::cuda {

std::vector<std::string> cutlass_down_variants();
bool is_cutlass_down_variant(const std::string& name);
// Throws naming the variant or the shape when it cannot run (before launching anything).
void launch_cutlass_gemm_residual(const GemmResidualArgs& a, const std::string& variant, cudaStream_t stream, bool pdl);

}  // namespace swapffn::cuda
