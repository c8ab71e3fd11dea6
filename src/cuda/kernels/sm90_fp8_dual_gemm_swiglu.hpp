// The fp8 backend's up projection in one Hopper kernel: u = silu(x W1^T) * (x W3^T) from e4m3 operands
// with the scales of a recipe (swapffn/fp8.hpp). It exists because cuBLASLt can fuse neither the
// SwiGLU nor the quantisation: its path writes the [M, 2F] products in bf16 and reads them back.
// wgmma e4m3 with fp32 accumulation.
//   blocks: each 128-k block promoted into fp32 registers with its scales (acc += block * sa[row] *
//     sw[block]), which also bounds the tensor cores' limited fp8 accumulation precision to one
//     block; u quantised at once to e4m3 in 1x128 blocks.
//   rows: the accumulators run over all of k and are scaled once (sa[row] * sw[channel]); u is
//     quantised to e4m3 with one scale per row in the epilogue: a row's amax needs all of its n
//     tiles, so the units of an m tile publish theirs (an atomic max: order-free, hence
//     deterministic) and wait for each other across CTAs (no [M, F] bf16 round trip).
#pragma once
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
  uint8_t* u;             // [m, f] e4m3
  float* u_scale;         // blocks: [f / 128, m] (the rows innermost); rows: [m]
  // rows: the kernel's workspace, all zeros before the first launch; each launch leaves it so (the
  // last unit of an m tile resets it). Launches that may overlap (streams side by side) need
  // disjoint ones. Rows [r0, r0 + m) of a larger one, r0 a multiple of 64: row_amax + r0 and
  // row_arrivals + r0 / 64.
  float* row_amax;         // [m]: each row's |u| max
  uint32_t* row_arrivals;  // [fp8_dual_gemm_row_tiles(m)]: per 64-row tile, its units' arrivals
  int m, f, k;             // f and k multiples of 128
};

// The row_arrivals counters for m rows: one per 64-row tile.
inline int64_t fp8_dual_gemm_row_tiles(int64_t m) { return (m + 63) / 64; }

// Launched as a programmatic dependent of the previous kernel (it waits for it before reading x);
// rows: also cooperative (its CTAs wait for each other), and f / 128 must not exceed the clusters
// resident on the GPU (66 on a 132-SM Hopper: f <= 8448), else it throws.
void launch_fp8_dual_gemm_swiglu(const Fp8DualGemmSwigluArgs& a, cudaStream_t stream);

// Whether the rows scaling runs for d_ff = f on the current device (its f / 128 units of a row
// resident at once), so that an engine chooses its path when it is built, not at its first step.
bool fp8_dual_gemm_rows_fits(int64_t f);

// w1 [f, k] and w3 [f, k] e4m3 interleaved in blocks of 8 rows into [2f, k] (rows 16g..16g+7 =
// w1[8g..8g+7], rows 16g+8..16g+15 = w3[8g..8g+7]): a thread's accumulators then hold the gate and up
// values of the same outputs. f must be a multiple of 8.
std::vector<uint8_t> interleave_w13_e4m3(const std::vector<uint8_t>& w1, const std::vector<uint8_t>& w3, int64_t f,
                                         int64_t k);

}  // namespace swapffn::cuda
