// CPU reference of the four NVFP4 operations of issue 5 (the semantics the GPU kernels must match),
// the seeded input generators with the competition's distributions, and the plain <-> blocked 128x4
// scale-layout conversion. Host only; no CUDA needed.
#pragma once
#include <cstdint>
#include <vector>

#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4 {

// e2m1 code (low 4 bits) -> value: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (8 is -0).
float e2m1_to_float(uint8_t code);
// fp8 e4m3 "fn" (bias 7, max 448, no infinities, 0x7F/0xFF NaN) -> value; exact.
float e4m3fn_to_float(uint8_t bits);
// float -> e4m3fn, round to nearest even, saturating finite overflow to +-448 (NaN stays NaN).
uint8_t float_to_e4m3fn(float f);
// IEEE binary16 bits <-> float; float_to_fp16 rounds to nearest even (overflow -> inf).
float fp16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);

// One NVFP4 operand on the host, always stored with plain scales: data (rows, K/2, L) and scales
// (rows, K/16, L), batch outermost.
struct HostOperand {
  int64_t rows = 0, k = 0, batches = 1;
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
  float value(int64_t row, int64_t kk, int64_t b) const;  // dequantized element, exact in fp32
};

// Scales of `rows` x `kscales` per batch, plain <-> blocked 128x4 (padding bytes are zero).
std::vector<uint8_t> scales_to_blocked(const std::vector<uint8_t>& plain, int64_t rows,
                                       int64_t kscales, int64_t batches);
std::vector<uint8_t> scales_to_plain(const std::vector<uint8_t>& blocked, int64_t rows,
                                     int64_t kscales, int64_t batches);

// Seeded generators with issue 5's distributions (same seed -> same bytes on every platform).
enum class InputKind {
  gemv,     // bytes uniform in [0, 4), scales uniform in {0, 1, 2}
  gemm,     // bytes uniform over all 256 patterns, scales uniform in {0, 1, 2, 3}
  dual,     // bytes uniform in [0, 255) & 0b1011'1011, scales e4m3fn(uniform [0, 1))
  grouped,  // bytes as dual, scales uniform in {1, 2}
};
HostOperand make_operand(InputKind kind, int64_t rows, int64_t k, int64_t batches, uint64_t seed);

// References. Outputs are fp16 bits; c is (M, N, L) with strides (N, 1, M*N) (GEMV: N = 1).
// Sums are fp32 in increasing k over values dequantized exactly; the dual GEMM applies
// silu(g) * u in fp32 (silu(g) = g / (1 + exp(-g))) and rounds once.
std::vector<uint16_t> reference_gemv(const HostOperand& a, const HostOperand& b);
std::vector<uint16_t> reference_gemm(const HostOperand& a, const HostOperand& b);
std::vector<uint16_t> reference_dual_gemm_swiglu(const HostOperand& a, const HostOperand& b1,
                                                 const HostOperand& b2);
// Grouped: one reference_gemm per group (each with one batch), one output per group.
std::vector<std::vector<uint16_t>> reference_grouped_gemm(const std::vector<HostOperand>& a,
                                                          const std::vector<HostOperand>& b);

}  // namespace swapffn::nvfp4
