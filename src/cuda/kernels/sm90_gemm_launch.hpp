// Host side of the Hopper GEMMs of the fused backend: problem arguments, the variant (tile N,
// pipeline stages, split-K) chosen by the caller, and the launch helper that sets the cluster
// shape, programmatic dependent launch and the dynamic shared-memory limit.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "swapffn/bf16.hpp"

namespace swapffn::cuda {

// Kernel configuration of one GEMM (separate from the problem shape). split_k changes the
// floating-point summation order; bn and stages do not.
struct GemmVariant {
  int bn = 128;
  int stages = 4;
  int split_k = 1;
  std::string name() const {
    return "bn" + std::to_string(bn) + "_st" + std::to_string(stages) + "_sk" + std::to_string(split_k);
  }
  bool operator==(const GemmVariant&) const = default;
};

// u[M, F] = silu(A W1^T) * (A W3^T); tma_b maps the interleaved [2F, K] weights.
struct DualGemmSwigluArgs {
  CUtensorMap tma_a, tma_b;  // A [M, K] box 128x64; W13 [2F, K] box BNx64
  __nv_bfloat16* u;
  int m, n2, k;  // n2 = 2F
};

// h[M, N] (+)= A[M, K] W2[N, K]^T
struct GemmResidualArgs {
  CUtensorMap tma_a, tma_b;  // u [M, K] box 128x64; W2 [N, K] box BNx64
  float* h;
  int m, n, k;
  bool residual;
};

void launch_dual_gemm_swiglu(const DualGemmSwigluArgs& a, const GemmVariant& v, cudaStream_t stream, bool pdl);
void launch_gemm_residual(const GemmResidualArgs& a, const GemmVariant& v, cudaStream_t stream, bool pdl);

// The dual GEMM's B operand: w1 [F, K] and w3 [F, K] interleaved in blocks of 8 rows into [2F, K]
// (rows 16g..16g+7 = w1[8g..8g+7], rows 16g+8..16g+15 = w3[8g..8g+7]). F must be a multiple of 8.
std::vector<bf16> interleave_w13(const std::vector<bf16>& w1, const std::vector<bf16>& w3, int64_t f, int64_t k);

// The variants compiled into this build (the tuner's search space).
std::vector<GemmVariant> dual_gemm_variants();
std::vector<GemmVariant> down_gemm_variants();

// Launches a kernel with a (1, 1, cluster_z) cluster and, when pdl, programmatic dependent launch
// (the kernel calls griddepcontrol.wait before touching its inputs).
template <class Kernel, class... Args>
void launch_gemm_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, int cluster_z, cudaStream_t stream,
                        bool pdl, Args... args) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  int n = 0;
  attrs[n].id = cudaLaunchAttributeClusterDimension;
  attrs[n].val.clusterDim.x = 1;
  attrs[n].val.clusterDim.y = 1;
  attrs[n].val.clusterDim.z = static_cast<unsigned>(cluster_z);
  ++n;
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = static_cast<unsigned>(n);
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace swapffn::cuda
