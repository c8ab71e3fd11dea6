// CublasFfnGemms: the bench's anchor for the fused backends, "cuBLAS's FFN GEMMs alone". Per FFN step
// of a token step (E * k_ffn of them, 16 with the defaults) the three GEMMs a PyTorch step runs:
// gate = x W1^T, up = x W3^T, down = u W2^T, bf16 outputs, fp32 accumulation, each through cuBLASLt's
// first pick for its shape (no batch-invariance pinning, no split-K restriction: the anchor is
// whatever cuBLAS does best). Nothing else: no SwiGLU, norm, router, residual or collapse.
// Operands in bf16 (`cublas-ffn-gemms`, the anchor of fused), or in e4m3 with the fp8 recipe's block
// scales (`cublas-fp8-gemms`, the anchor of fused-fp8: cuBLASLt's block-scaled fp8 matmul, Hopper), or
// in e4m3 with coarser scales than the recipe's (`bench --fp8-headroom`): what cuBLASLt's fp8 GEMMs
// gain when they need not apply a scale per 128 of k, the headroom a coarser recipe would have.
//
// Why it exists: the fused step must beat these GEMMs end to end. They are quoted as measured
// on another H200 under an unknown load history; a 700 W-capped board's sustained clock moves a point
// by 10-15%, so `bench` times them itself, at every batch size, beside the backends.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "bench/anchor_operands.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cuda {

class CublasFfnGemms {
 public:
  // rows = B * C. The weights are the model's (e4m3: its fp8 weights when they are in the anchor's
  // scaling, else its bf16 ones quantised in it; per tensor: the rows scaling's codes under the
  // largest of its scales); x is uniform random in [-1, 1) from `seed` (e4m3: random codes and scales).
  CublasFfnGemms(const Weights& w, int64_t rows, uint64_t seed, AnchorOperands operands = AnchorOperands::bf16());
  // The same GEMMs on random weights of the model's scale (`tune --gemms-only` times them one by one).
  CublasFfnGemms(int64_t d_model, int64_t d_ff, int64_t ffn_steps, int64_t rows, uint64_t seed,
                 AnchorOperands operands = AnchorOperands::bf16());
  ~CublasFfnGemms();
  CublasFfnGemms(const CublasFfnGemms&) = delete;
  CublasFfnGemms& operator=(const CublasFfnGemms&) = delete;

  // Enqueues one token step's GEMMs on `stream` (capturable: no host work, no allocation). Every FFN
  // step multiplies the same x, and its down GEMM reads the gate output as u (e4m3: a random u of
  // the gate's shape, since a bf16 output is no e4m3 operand).
  void enqueue_step(cudaStream_t stream) const;
  // One of a step's GEMMs alone.
  enum class Gemm { gate, up, down };
  void enqueue_gemm(Gemm g, cudaStream_t stream) const;
  int64_t gemms_per_step() const;
  // The algorithm cuBLASLt picked for one GEMM, and for the gate/up and the down shapes, for reports.
  std::string algorithm(Gemm g) const;
  std::string describe() const;

  int64_t rows() const;
  AnchorOperands operands() const;
  // Device buffers, row-major (tests read them): the bf16 outputs gate and up [rows, F], down
  // [rows, D]; the inputs x [rows, D] and u [rows, F] (bf16 operands: x only, u is the gate output),
  // as bf16 or e4m3 codes, and the e4m3 inputs' scales: [k / 128, rows] (GemmOperands' layout), [rows]
  // (e4m3_rows) or one (e4m3_tensor); the weights' scales (e4m3_rows: [n]; e4m3_tensor: one).
  const void* x() const;
  const void* u() const;
  const float* x_scale() const;
  const float* u_scale() const;
  const void* w1() const;
  const void* w2() const;
  const float* w1_scale() const;
  const float* w2_scale() const;
  __nv_bfloat16* gate() const;
  __nv_bfloat16* up() const;
  __nv_bfloat16* down() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace swapffn::cuda
