// The fp8 backend's down projection in one Hopper kernel: out (+)= a W^T from e4m3 operands with the
// recipe's block scales (swapffn/fp8.hpp) into the fp32 residual. It exists because cuBLASLt's
// block-scaled matmul has only 128x128 tiles: at B = 1 (512 rows, d_model 1024) that is 32 CTAs on a
// 132-SM GPU, each bound by the bytes it must read alone. wgmma e4m3 with fp32 accumulation, each
// 128-k block promoted into fp32 registers with its scales (acc += block * sa[row] * sw[block]), the
// k blocks in order: an output's bits do not depend on the tile shape or the row count.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace swapffn::cuda {

// The compiled tiles: 64 rows by 64 columns (many small tiles: one wave at B = 1) or by 256 (two
// 128-column halves: a quarter of the row reads per output, for many rows).
enum class Fp8GemmTile : uint8_t { m64n64, m64n256 };

struct Fp8GemmResidualArgs {
  const uint8_t* a;      // [m, k] e4m3
  const float* a_scale;  // [k / 128, m] (the rows innermost)
  const uint8_t* w;      // [n, k] e4m3
  const float* w_scale;  // [blocks(n), stride] (BatchInvariantGemm's weight_scales layout)
  int scale_stride;      // weight_scale_stride(k)
  float* out;            // [m, n] fp32: out += a W^T when accumulate, else out = a W^T
  bool accumulate;
  int m, n, k;           // n a multiple of 64 (128 for m64n256), k of 128
};

// Launched as a programmatic dependent of the previous kernel (it waits for it before reading a,
// its scales and out; the first stages of W are loaded before).
void launch_fp8_gemm_residual(const Fp8GemmResidualArgs& a, Fp8GemmTile tile, cudaStream_t stream);

}  // namespace swapffn::cuda
