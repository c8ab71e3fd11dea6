// The fp8 backend's up projection in one Hopper kernel: u = silu(x W1^T) * (x W3^T) from e4m3 operands
// with the scales of a recipe (swapffn/fp8.hpp). It exists because cuBLASLt can fuse neither the
// SwiGLU nor the quantisation: its path writes the [M, 2F] products in bf16 and reads them back.
// wgmma e4m3 with fp32 accumulation.
//   blocks: each 128-k block promoted into fp32 registers with its scales (acc += block * sa[row] *
//     sw[block]), which also bounds the tensor cores' limited fp8 accumulation precision to one
//     block; u quantised at once to e4m3 in 1x128 blocks.
//   rows: the accumulators run over all of k and are scaled once (sa[row] * sw[channel]); u is
//     written in bf16 for the per-row quantisation (fp8_quantize_rows), since a row's scale needs
//     all of its n tiles ([M, F] bf16: half the bytes of cuBLASLt's [M, 2F]).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

struct Fp8DualGemmSwigluArgs {
  fp8::Scaling scaling;
  const uint8_t* x;       // [m, k] e4m3
  const float* x_scale;   // blocks: [k / 128, m] (the rows innermost); rows: [m]
  const uint8_t* w13;     // [2f, k] e4m3: w1 and w3 interleaved (interleave_w13_e4m3)
  const float* w1_scale;  // blocks: [f / 128, stride] (BatchInvariantGemm's weight_scales layout); rows: [f]
  const float* w3_scale;  // the same for w3
  int scale_stride;       // blocks: weight_scale_stride(k)
  uint8_t* u;             // blocks: [m, f] e4m3
  float* u_scale;         // blocks: [f / 128, m] (the rows innermost)
  __nv_bfloat16* u_bf16;  // rows: [m, f] bf16
  int m, f, k;            // f and k multiples of 128
};

// Launched as a programmatic dependent of the previous kernel (it waits for it before reading x).
void launch_fp8_dual_gemm_swiglu(const Fp8DualGemmSwigluArgs& a, cudaStream_t stream);

// w1 [f, k] and w3 [f, k] e4m3 interleaved in blocks of 8 rows into [2f, k] (rows 16g..16g+7 =
// w1[8g..8g+7], rows 16g+8..16g+15 = w3[8g..8g+7]): a thread's accumulators then hold the gate and up
// values of the same outputs. f must be a multiple of 8.
std::vector<uint8_t> interleave_w13_e4m3(const std::vector<uint8_t>& w1, const std::vector<uint8_t>& w3, int64_t f,
                                         int64_t k);

}  // namespace swapffn::cuda
