// BatchInvariantGemm: out[rows, n] = X[rows, k] . W[n, k]^T (+ out when accumulating) through cuBLASLt,
// fp32 accumulation, output fp32 or bf16 (row-major throughout, W in nn.Linear layout). The operands
// are bf16, or e4m3 with the fp32 scales of an fp8 scaling (swapffn/fp8.hpp): blocks, W in 128x128
// blocks and X in 1x128 blocks along k (cuBLASLt's BLK128x128_32F and VEC128_32F scale modes); rows,
// one scale per output channel of W and per row of X (OUTER_VEC_32F). Hopper only.
//
// Why pinned: cuBLAS picks its kernel (tile, split-K) per problem size, so the same row could be
// summed in a different order when the batch (the row count) changes, breaking bitwise batch
// invariance. The anchor algorithm is therefore chosen once per (n, k) from the heuristic at a
// fixed reference row count, with split-K excluded; set_rows() verifies that it supports the new
// row count and refuses it otherwise.
// But an algorithm that is best at the reference rows can be poor at other row counts (the 64 x 64
// tiles picked at 512 rows ran the down GEMM at 8192 rows in 188 us against 90 us for the best
// algorithm there). So set_rows() also takes the heuristic's split-K-free algorithms at the new
// row count, keeps those that reproduce the anchor's bits (each runs on two probes per row count,
// random operands with a random accumulator when accumulating, and operands whose products cancel in
// pairs, so that each output is the rounding residue of its summation order, which a bf16 output
// keeps where it would round away the last bits of a random sum; every output must match the
// anchor's run bitwise) and times them with the anchor, running the fastest. Without split-K every
// output is one chain of tensor-core k-steps in k order, so algorithms that differ in tiles, stages
// or clusters normally agree; any that does not is left out.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/runtime/cublaslt_handles.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

// "algo=<id> tile=<id> stages=<id> splitk=<n> ..." of a cuBLASLt algorithm, for logs and reports.
std::string describe_cublaslt_algo(const cublasLtMatmulAlgo_t& algo);

// SWAPFFN_LOG_GEMMS set (and not "0"): the engines log their GEMM algorithms on stderr, and set_rows()
// each candidate's timing at each row count (the choice is made by that timing, once, on this GPU).
bool gemm_log_enabled();

// A product's operands: bf16, or e4m3 codes with the fp32 scales of an fp8::Scaling, in cuBLASLt's
// layouts:
//   blocks: W scales [blocks(n), weight_scale_stride(k)] row-major, entry (n / 128, k / 128): the k
//     blocks innermost, padded to a multiple of 4 (weight_scales() packs an fp8::ScaledWeight so);
//     X scales [blocks(k), rows] row-major, entry (k / 128, row): the rows innermost;
//   rows: W scales [n], X scales [rows].
// An e4m3 product's rows must be a multiple of 4 (16-byte aligned scale columns and row offsets).
struct GemmOperands {
  std::optional<fp8::Scaling> e4m3;  // unset: bf16

  static GemmOperands bf16() { return {}; }
  static GemmOperands scaled_e4m3(fp8::Scaling s) { return {s}; }
};

// An e4m3 operand of a scaled product: its codes and its scales (layouts: GemmOperands).
struct ScaledOperand {
  const void* data;
  const float* scale;
};

// The row stride of a weight's scales: its k blocks padded to a multiple of 4.
inline int64_t weight_scale_stride(int64_t k) { return (fp8::blocks(k) + 3) / 4 * 4; }
// w's scales in the W layout of GemmOperands for its scaling (blocks: padding entries 1).
std::vector<float> weight_scales(const fp8::ScaledWeight& w);

class BatchInvariantGemm {
 public:
  // out_type: CUDA_R_32F or CUDA_R_16BF. accumulate: out += X.W^T (beta = 1) instead of out = X.W^T.
  BatchInvariantGemm(cublasLtHandle_t lt, int64_t n, int64_t k, cudaDataType_t out_type, bool accumulate,
                     int64_t reference_rows, size_t workspace_bytes, GemmOperands operands = GemmOperands::bf16());
  BatchInvariantGemm(const BatchInvariantGemm&) = delete;
  BatchInvariantGemm& operator=(const BatchInvariantGemm&) = delete;

  // Prepares the layouts for `rows` rows and makes it the row count of run() without one (host-only
  // work; call outside graph capture). Row counts prepared earlier stay available to run(rows, ...).
  void set_rows(int64_t rows);
  // Enqueues the product on stream (bf16 operands). w: [n, k] bf16, x: [rows, k] bf16, out: [rows, n].
  void run(const void* w, const void* x, void* out, void* workspace, cudaStream_t stream) const;
  // The same for a row count given to set_rows() before (row chunks of one batch; same algorithm, so
  // every row's bits are those of a whole-batch run).
  void run(int64_t rows, const void* w, const void* x, void* out, void* workspace, cudaStream_t stream) const;
  // The product of scaled e4m3 operands (GemmOperands) at a prepared row count.
  void run(int64_t rows, ScaledOperand w, ScaledOperand x, void* out, void* workspace, cudaStream_t stream) const;

  // "algo=<id> tile=<id> stages=<id> ..." of the anchor, or of the algorithm used at `rows` rows
  // (given to set_rows before), for logs and benchmark reports.
  std::string describe() const;
  std::string describe(int64_t rows) const;
  int64_t rows() const { return rows_; }

 private:
  // cuBLASLt handles own themselves, so none leaks when a check between creation and use throws
  // (the constructor's included).
  using Layout = cublaslt::Layout;
  using MatmulDesc = cublaslt::MatmulDesc;
  struct RowLayouts {
    int64_t rows;
    Layout x, out;
    cublasLtMatmulAlgo_t algo;  // the anchor, or an algorithm that reproduced its bits
  };
  // Random operands (and their scales) of a product at `rows` rows (defined in the .cpp).
  struct RandomOperands;
  // Random operands at min(rows, 1024) rows and the anchor's outputs on them (defined in the .cpp).
  struct Probe;
  bool e4m3() const { return operands_.e4m3.has_value(); }
  // "bf16 GEMM n=.. k=.." or "e4m3 GEMM n=.. k=.. with rows scales (...)", the out type and beta:
  // what an error about this product names.
  std::string what() const;
  // The x and out layouts at `rows` rows (algo left unset).
  RowLayouts make_row_layouts(int64_t rows) const;
  // The split-K-free algorithms the heuristic offers for these layouts (fitting the workspace),
  // best first; heuristic_best() takes the first.
  std::vector<cublasLtMatmulAlgo_t> heuristic_candidates(cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t out) const;
  bool heuristic_best(cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t out, cublasLtMatmulAlgo_t& algo) const;
  // One product with `algo` (the scale pointers of e4m3 operands set first).
  void matmul(const RowLayouts& l, const cublasLtMatmulAlgo_t& algo, const void* w, const float* w_scale,
              const void* x, const float* x_scale, void* out, void* workspace, cudaStream_t stream) const;
  // The fastest of `algos` at `rows` rows on random operands (median of 5 runs each).
  const cublasLtMatmulAlgo_t& fastest(const std::vector<cublasLtMatmulAlgo_t>& algos, const RowLayouts& l) const;
  // Whether `candidate` gives bitwise the anchor's outputs on the probe.
  bool same_bits_as_anchor(const cublasLtMatmulAlgo_t& candidate, const Probe& probe) const;
  const RowLayouts& layouts_of(int64_t rows) const;

  cublasLtHandle_t lt_;
  int64_t n_, k_, rows_ = -1;
  cudaDataType_t out_type_;
  float beta_;
  size_t workspace_bytes_;
  GemmOperands operands_;
  MatmulDesc op_;
  Layout w_layout_;
  // e4m3 products: the scale pointers the heuristic queries see.
  DeviceBuffer<float> placeholder_scales_;
  std::vector<RowLayouts> row_layouts_;  // every row count prepared so far
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace swapffn::cuda
