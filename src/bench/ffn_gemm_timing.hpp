// Timing of the fused backend's FFN GEMM variants against cuBLAS on the same shapes, on the present
// GPU. Used by `swapffn tune` (pick variants per batch size) and to explain the fused step's time.
#pragma once
#include <string>
#include <vector>

#include "cuda/kernels/sm90_gemm_launch.hpp"

namespace swapffn::cuda {

struct GemmTiming {
  // "dual_swiglu", "down_residual", "down_cutlass" (the same product through CUTLASS's kernels),
  // "dual_operands_only", "dual_mma_only", "down_operands_only", "down_mma_only" (GemmFeed),
  // "cublas_gate_up", "cublas_down", "anchor_gate", "anchor_down" (the anchor's GEMMs, as
  // `bench` runs them), "cublas_down_pinned" (the fused step's down GEMM:
  // batch-invariant cuBLASLt, fp32 h += u W2^T), "cublas_peak"
  std::string gemm;
  int m = 0, n = 0, k = 0;
  std::string label;    // the variant's name ("-" for cuBLAS rows)
  double us = 0;        // median time of one launch
  double tflops = 0;
  std::string algo;     // cuBLASLt algorithm of the pinned row; for our down variants, whether
                        // their bits equal the pinned cuBLAS GEMM's and how many clusters fit one wave
};

// Times every compiled variant (and cuBLAS) for each row count in ms on random bf16 data;
// reference_rows anchors the pinned down GEMM's numerics as in the engines (the core count).
// Then, per row count, the down GEMMs in the step's context ("pair_dual_down" rows): the dual GEMM
// variant up[i] (the one the engine runs at ms[i]) and a down GEMM launched in turn, as in an FFN
// step (the down GEMM reads the u just written, with the dual GEMM's programmatic edge into ours),
// for cuBLAS's pinned GEMM and each of our variants that sum like it, with and without that edge.
// A down GEMM can cost more there than alone; the row's note gives the pair time less the dual
// GEMM's time alone.
std::vector<GemmTiming> time_ffn_gemms(int d_model, int d_ff, const std::vector<int>& ms, int repeats,
                                       int reference_rows, const std::vector<GemmVariant>& up);

}  // namespace swapffn::cuda
