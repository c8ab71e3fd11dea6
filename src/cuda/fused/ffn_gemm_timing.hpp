// Timing of the fused backend's FFN GEMM variants against cuBLAS on the same shapes, on the present
// GPU. Used by `swapffn tune` (pick variants per batch size) and to explain the fused step's time.
#pragma once
#include <string>
#include <vector>

#include "cuda/kernels/sm90_gemm_launch.hpp"

namespace swapffn::cuda {

struct GemmTiming {
  std::string gemm;  // "dual_swiglu", "down_residual", "cublas_gate_up", "cublas_down", "cublas_peak"
  int m = 0, n = 0, k = 0;
  GemmVariant variant;  // meaningless for cuBLAS rows
  double us = 0;        // median time of one launch
  double tflops = 0;
};

// Times every compiled variant (and cuBLAS) for each row count in ms on random bf16 data.
std::vector<GemmTiming> time_ffn_gemms(int d_model, int d_ff, const std::vector<int>& ms, int repeats);

}  // namespace swapffn::cuda
