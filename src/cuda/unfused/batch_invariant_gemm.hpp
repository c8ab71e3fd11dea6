// BatchInvariantGemm: out[rows, n] = X[rows, k] . W[n, k]^T (+ out when accumulating) through cuBLASLt,
// bf16 operands, fp32 accumulation, output fp32 or bf16 (row-major throughout, W in nn.Linear layout).
//
// Why pinned: cuBLAS picks its kernel (tile, split-K) per problem size, so the same row could be
// summed in a different order when the batch (the row count) changes, breaking bitwise batch
// invariance. The algorithm is therefore chosen once per (n, k) from the heuristic at a fixed
// reference row count, with split-K excluded, and reused for every row count; set_rows() verifies
// that the pinned algorithm supports the new row count and refuses it otherwise.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace swapffn::cuda {

class BatchInvariantGemm {
 public:
  // out_type: CUDA_R_32F or CUDA_R_16BF. accumulate: out += X.W^T (beta = 1) instead of out = X.W^T.
  BatchInvariantGemm(cublasLtHandle_t lt, int64_t n, int64_t k, cudaDataType_t out_type, bool accumulate,
                     int64_t reference_rows, size_t workspace_bytes);
  ~BatchInvariantGemm();
  BatchInvariantGemm(const BatchInvariantGemm&) = delete;
  BatchInvariantGemm& operator=(const BatchInvariantGemm&) = delete;

  // Prepares the layouts for `rows` rows and makes it the row count of run() without one (host-only
  // work; call outside graph capture). Row counts prepared earlier stay available to run(rows, ...).
  void set_rows(int64_t rows);
  // Enqueues the product on stream. w: [n, k] bf16, x: [rows, k] bf16, out: [rows, n].
  void run(const void* w, const void* x, void* out, void* workspace, cudaStream_t stream) const;
  // The same for a row count given to set_rows() before (row chunks of one batch; same algorithm, so
  // every row's bits are those of a whole-batch run).
  void run(int64_t rows, const void* w, const void* x, void* out, void* workspace, cudaStream_t stream) const;

  // "algo=<id> tile=<id> stages=<id> ..." for logs and benchmark reports.
  std::string describe() const;
  int64_t rows() const { return rows_; }

 private:
  struct RowLayouts {
    int64_t rows;
    cublasLtMatrixLayout_t x, out;
  };
  void make_row_layouts(int64_t rows, cublasLtMatrixLayout_t& x, cublasLtMatrixLayout_t& out) const;

  cublasLtHandle_t lt_;
  int64_t n_, k_, rows_ = -1;
  cudaDataType_t out_type_;
  float beta_;
  size_t workspace_bytes_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  std::vector<RowLayouts> row_layouts_;  // every row count prepared so far
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace swapffn::cuda
