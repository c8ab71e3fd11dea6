// Timing of the fused backend's FFN GEMMs against cuBLAS on the same shapes, on the present GPU:
// what `swapffn tune` prints before it times whole steps (each dual GEMM tile alone explains the
// step's choice per batch size).
#pragma once
#include <string>
#include <vector>

namespace swapffn::cuda {

struct GemmTiming {
  // "dual_swiglu" (each compiled tile), "cublas_gate_up", "anchor_gate", "anchor_down" (the bench
  // anchor's GEMMs), "cublas_down_pinned" (the fused step's down GEMM: batch-invariant cuBLASLt,
  // fp32 h += u W2^T), "cublas_peak"
  std::string gemm;
  int m = 0, n = 0, k = 0;
  std::string label;  // the tile's name ("-" for cuBLAS rows)
  double us = 0;      // median time of one launch
  double tflops = 0;
  std::string algo;   // cuBLASLt's algorithm, where it has one
};

// Times each GEMM for each row count in ms on random bf16 data; reference_rows anchors the pinned
// down GEMM's numerics as in the engines (the core count).
std::vector<GemmTiming> time_ffn_gemms(int d_model, int d_ff, const std::vector<int>& ms, int repeats,
                                       int reference_rows);

}  // namespace swapffn::cuda
