// The rows scaling's w2 GEMM in one Hopper kernel: h[M, N] (+)= (a[M, K] w[N, K]^T) * sa[row] *
// sw[channel] from e4m3 operands (swapffn/fp8.hpp). It exists because cuBLASLt's OUTER_VEC kernels run
// it no faster than its block-scaled ones (at 512 rows on 32 of 132 SMs), while the rows scaling
// needs no promotion: every output is one chain of m64nXk32 wgmma k-steps in k order, scaled once,
// so the tile may follow the row count without changing a bit (batch invariance).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace swapffn::cuda {

struct Fp8RowsGemmArgs {
  const uint8_t* a;      // [m, k] e4m3 (the quantised SwiGLU output u)
  const float* a_scale;  // [m]
  const uint8_t* w;      // [n, k] e4m3 (W2)
  const float* w_scale;  // [n]
  float* h;              // [m, n] fp32, updated in place
  int m, n, k;           // n a multiple of the tile's width (64 at least), k of 128
  bool residual;         // h += product (else h = product)
};

// Output tiles; each consumer warpgroup owns whole outputs, so all give the same bits.
enum class Fp8RowsTile {
  m64n64,    // one wave at small m: 128 CTAs at 512 rows and n = 1024
  m128n128,  // half the operand bytes per output once 64 x 64 tiles take more than one wave
  m128n256,  // a third fewer again where its tiles still fill the SMs (n % 256 == 0)
};

// The tile for m rows on `sms` multiprocessors (the one place this choice is made): the fewest
// rounds of tiles over the SMs, each weighed by what an SM loads for a tile.
Fp8RowsTile fp8_rows_gemm_tile(int64_t m, int64_t n, int sms);

// Checks the shapes and launches as a programmatic dependent of the previous kernel (it waits for it
// before reading a, a_scale and h).
void launch_fp8_rows_gemm(const Fp8RowsGemmArgs& args, Fp8RowsTile tile, cudaStream_t stream);

}  // namespace swapffn::cuda
