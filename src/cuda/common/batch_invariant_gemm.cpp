#include "cuda/common/batch_invariant_gemm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"

namespace swapffn::cuda {

namespace {
// cuBLAS is column-major: out^T [n x rows] = W^T-view [n x k] (op T on the col-major [k x n] view of
// the row-major W) times X^T-view [k x rows] (the row-major X read as col-major, op N).
constexpr cublasOperation_t kTransW = CUBLAS_OP_T, kTransX = CUBLAS_OP_N;

uint32_t config_u32(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written));
  return v;
}
uint16_t config_u16(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint16_t v = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written));
  return v;
}
int32_t split_k_of(const cublasLtMatmulAlgo_t& a) {
  int32_t v = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof(v), &written));
  return v;
}
}  // namespace

std::string describe_cublaslt_algo(const cublasLtMatmulAlgo_t& algo) {
  int32_t id = 0;
  size_t written = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written));
  char buf[160];
  std::snprintf(buf, sizeof(buf), "algo=%d tile=%u stages=%u splitk=%d swizzle=%u custom=%u cluster=%u", id,
                config_u32(algo, CUBLASLT_ALGO_CONFIG_TILE_ID), config_u32(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                split_k_of(algo), config_u32(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                config_u32(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                static_cast<unsigned>(config_u16(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)));
  return buf;
}

BatchInvariantGemm::BatchInvariantGemm(cublasLtHandle_t lt, int64_t n, int64_t k, cudaDataType_t out_type,
                                       bool accumulate, int64_t reference_rows, size_t workspace_bytes)
    : lt_(lt), n_(n), k_(k), out_type_(out_type), beta_(accumulate ? 1.f : 0.f), workspace_bytes_(workspace_bytes) {
  SWAPFFN_REQUIRE(n > 0 && k > 0 && reference_rows > 0, "GEMM shape must be positive");
  SWAPFFN_REQUIRE(out_type == CUDA_R_32F || out_type == CUDA_R_16BF, "GEMM output must be fp32 or bf16");
  cublasLtMatmulDesc_t op = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  op_.reset(op);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &kTransW, sizeof(kTransW)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &kTransX, sizeof(kTransX)));
  cublasLtMatrixLayout_t w_layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_layout, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  w_layout_.reset(w_layout);

  const RowLayouts reference = make_row_layouts(reference_rows);
  SWAPFFN_REQUIRE(heuristic_best(reference.x.get(), reference.out.get(), algo_),
                  "cuBLASLt offers no split-K-free bf16 GEMM for n=" + std::to_string(n) + " k=" + std::to_string(k) +
                      " (this shape cannot run batch-invariantly)");
}

std::vector<cublasLtMatmulAlgo_t> BatchInvariantGemm::heuristic_candidates(cublasLtMatrixLayout_t x,
                                                                          cublasLtMatrixLayout_t out) const {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const cublaslt::Preference owns_pref(pref);
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;  // excludes split-K
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                    &no_reduction, sizeof(no_reduction)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes_, sizeof(workspace_bytes_)));
  constexpr int kWanted = 8;
  cublasLtMatmulHeuristicResult_t results[kWanted] = {};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, op_.get(), w_layout_.get(), x, out, out, pref, kWanted, results, &found);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(st);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && split_k_of(results[i].algo) <= 1) algos.push_back(results[i].algo);
  return algos;
}

bool BatchInvariantGemm::heuristic_best(cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t out,
                                        cublasLtMatmulAlgo_t& algo) const {
  const std::vector<cublasLtMatmulAlgo_t> algos = heuristic_candidates(x, out);
  if (algos.empty()) return false;
  algo = algos.front();
  return true;
}

const cublasLtMatmulAlgo_t& BatchInvariantGemm::fastest(const std::vector<cublasLtMatmulAlgo_t>& algos, int64_t rows,
                                                        cublasLtMatrixLayout_t x, cublasLtMatrixLayout_t out) const {
  if (algos.size() == 1) return algos.front();
  const size_t out_bytes = size_t(rows * n_) * (out_type_ == CUDA_R_32F ? 4 : 2);
  DeviceBuffer<__nv_bfloat16> w(size_t(n_ * k_)), xs(size_t(rows * k_));
  DeviceBuffer<uint8_t> c(out_bytes), ws(workspace_bytes_);
  fill_random_bf16(w.get(), n_ * k_, 0x71e1, 0.05f, nullptr);
  fill_random_bf16(xs.get(), rows * k_, 0x71e2, 1.f, nullptr);
  CUDA_CHECK(cudaMemset(c.get(), 0, out_bytes));
  const OwnedTimingEvents ev;
  const float alpha = 1.f;
  size_t best = 0;
  float best_ms = 0.f;
  // A sample is 10 back-to-back launches between two events: one launch alone carries the ~3-4 us
  // of an event-timed launch, noise of the size of the differences measured, and a one-launch
  // median let engines of one build pick different algorithms for 512 rows (H100). A candidate displaces the anchor (algos[0]) only when it is clearly faster.
  constexpr int kLaunches = 10, kSamples = 5;
  constexpr float kMargin = 0.98f;
  for (size_t i = 0; i < algos.size(); ++i) {
    const auto launch = [&] {
      CUBLAS_CHECK(cublasLtMatmul(lt_, op_.get(), &alpha, w.get(), w_layout_.get(), xs.get(), x, &beta_, c.get(), out, c.get(), out,
                                  &algos[i], ws.get(), workspace_bytes_, nullptr));
    };
    for (int r = 0; r < 3; ++r) launch();
    std::vector<float> ms;
    for (int r = 0; r < kSamples; ++r) {
      CUDA_CHECK(cudaEventRecord(ev.start, nullptr));
      for (int l = 0; l < kLaunches; ++l) launch();
      CUDA_CHECK(cudaEventRecord(ev.stop, nullptr));
      ms.push_back(ev.elapsed_ms());
    }
    std::sort(ms.begin(), ms.end());
    const float median = ms[kSamples / 2];
    if (i == 0) {
      best_ms = median;
    } else if (median < best_ms * (best == 0 ? kMargin : 1.f)) {
      best = i;
      best_ms = median;
    }
  }
  return algos[best];
}

namespace {
// A bf16 matrix [rows, k] (bits) whose columns [h, 2h), h = k / 2, repeat columns [0, h), negated
// when `negate` (an odd k's last column zeroed): with X mirrored and W mirrored negated, each product
// of the second half cancels one of the first exactly.
std::vector<uint16_t> mirrored(std::vector<uint16_t> m, int64_t rows, int64_t k, bool negate) {
  const int64_t h = k / 2;
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = m.data() + r * k;
    for (int64_t j = 0; j < h; ++j) row[h + j] = negate ? uint16_t(row[j] ^ 0x8000u) : row[j];
    if (k % 2) row[k - 1] = 0;
  }
  return m;
}

std::vector<uint16_t> download_bits(const __nv_bfloat16* p, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  CUDA_CHECK(cudaMemcpy(h.data(), p, h.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  return h;
}
}  // namespace

// Made once per row count by set_rows(), at the first candidate to verify: every candidate runs on
// the same two operand sets and is compared with the anchor's one run on each.
// 1. Random operands from random starting outputs c0 (read when accumulating).
// 2. Operands whose products cancel in pairs, from zero outputs: every output is then the rounding
//    residue of its summation order alone. On random operands two orders differ only in the last
//    bits of an fp32 sum, which a bf16 output mostly rounds away (a candidate that sums in another
//    order could match the anchor on every bf16 output of the random probe); the residue keeps
//    the difference in a bf16 output.
struct BatchInvariantGemm::Probe {
  Probe(const BatchInvariantGemm& owner, int64_t rows);
  // The outputs of `algo` on both operand sets, one after the other.
  std::vector<uint8_t> outputs(const cublasLtMatmulAlgo_t& algo) const;

  const BatchInvariantGemm& gemm;
  RowLayouts layouts;
  size_t out_bytes;
  DeviceBuffer<__nv_bfloat16> w, xs, w_cancel, xs_cancel;
  DeviceBuffer<uint8_t> c0, zeros, c, ws;  // c: each run's outputs
  std::vector<uint8_t> anchor;             // the anchor's outputs, copied to the host

 private:
  void run(const cublasLtMatmulAlgo_t& algo, const __nv_bfloat16* w_op, const __nv_bfloat16* x_op,
           const DeviceBuffer<uint8_t>& start, uint8_t* host_out) const;
};

BatchInvariantGemm::Probe::Probe(const BatchInvariantGemm& owner, int64_t rows)
    : gemm(owner),
      layouts(owner.make_row_layouts(std::min<int64_t>(rows, 1024))),
      out_bytes(size_t(layouts.rows * owner.n_) * (owner.out_type_ == CUDA_R_32F ? 4 : 2)),
      w(size_t(owner.n_ * owner.k_)),
      xs(size_t(layouts.rows * owner.k_)),
      c0(out_bytes),
      zeros(out_bytes),
      c(out_bytes),
      ws(owner.workspace_bytes_) {
  const int64_t n = gemm.n_, k = gemm.k_, m = layouts.rows;
  fill_random_bf16(w.get(), n * k, 0x5eed1, 0.05f, nullptr);
  fill_random_bf16(xs.get(), m * k, 0x5eed2, 1.f, nullptr);
  if (gemm.out_type_ == CUDA_R_32F)
    fill_random_f32(reinterpret_cast<float*>(c0.get()), m * n, 0x5eed3, 1.f, nullptr);
  else
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(c0.get()), m * n, 0x5eed3, 1.f, nullptr);
  CUDA_CHECK(cudaMemset(zeros.get(), 0, out_bytes));
  const auto upload_bits = [](DeviceBuffer<__nv_bfloat16>& to, const std::vector<uint16_t>& bits) {
    to.upload(reinterpret_cast<const __nv_bfloat16*>(bits.data()), bits.size());
  };
  upload_bits(w_cancel, mirrored(download_bits(w.get(), n * k), n, k, true));
  upload_bits(xs_cancel, mirrored(download_bits(xs.get(), m * k), m, k, false));
  anchor = outputs(gemm.algo_);
}

void BatchInvariantGemm::Probe::run(const cublasLtMatmulAlgo_t& algo, const __nv_bfloat16* w_op,
                                    const __nv_bfloat16* x_op, const DeviceBuffer<uint8_t>& start,
                                    uint8_t* host_out) const {
  CUDA_CHECK(cudaMemcpy(c.get(), start.get(), out_bytes, cudaMemcpyDeviceToDevice));
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(gemm.lt_, gemm.op_.get(), &alpha, w_op, gemm.w_layout_.get(), x_op, layouts.x.get(),
                              &gemm.beta_, c.get(), layouts.out.get(), c.get(), layouts.out.get(), &algo, ws.get(),
                              gemm.workspace_bytes_, nullptr));
  CUDA_CHECK(cudaMemcpy(host_out, c.get(), out_bytes, cudaMemcpyDeviceToHost));
}

std::vector<uint8_t> BatchInvariantGemm::Probe::outputs(const cublasLtMatmulAlgo_t& algo) const {
  std::vector<uint8_t> h(2 * out_bytes);
  run(algo, w.get(), xs.get(), c0, h.data());
  run(algo, w_cancel.get(), xs_cancel.get(), zeros, h.data() + out_bytes);
  return h;
}

bool BatchInvariantGemm::same_bits_as_anchor(const cublasLtMatmulAlgo_t& candidate, const Probe& probe) const {
  cublasLtMatmulHeuristicResult_t check{};
  const cublasLtMatrixLayout_t x = probe.layouts.x.get(), out = probe.layouts.out.get();
  if (cublasLtMatmulAlgoCheck(lt_, op_.get(), w_layout_.get(), x, out, out, &candidate, &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > workspace_bytes_)
    return false;
  return probe.outputs(candidate) == probe.anchor;
}

BatchInvariantGemm::RowLayouts BatchInvariantGemm::make_row_layouts(int64_t rows) const {
  const auto make = [rows](cudaDataType_t type, int64_t cols) {
    cublasLtMatrixLayout_t l = nullptr;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), cols));
    return Layout(l);
  };
  return {rows, make(CUDA_R_16BF, k_), make(out_type_, n_), {}};
}

void BatchInvariantGemm::set_rows(int64_t rows) {
  SWAPFFN_REQUIRE(rows > 0, "GEMM row count must be positive");
  for (const RowLayouts& l : row_layouts_)
    if (l.rows == rows) {
      rows_ = rows;
      return;
    }
  RowLayouts l = make_row_layouts(rows);
  cublasLtMatmulHeuristicResult_t check{};
  const cublasStatus_t st =
      cublasLtMatmulAlgoCheck(lt_, op_.get(), w_layout_.get(), l.x.get(), l.out.get(), l.out.get(), &algo_, &check);
  if (st != CUBLAS_STATUS_SUCCESS || check.workspaceSize > workspace_bytes_)
    SWAPFFN_FAIL("the pinned cuBLASLt algorithm (" + describe() + ") cannot run " + std::to_string(rows) +
                 " rows for n=" + std::to_string(n_) + " k=" + std::to_string(k_) + ": " +
                 (st != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(st) : "workspace too small"));
  // Candidates: the anchor and the heuristic's split-K-free algorithms at this row count that give
  // the anchor's bits; the fastest of them on this GPU (timed here, once per row count) runs.
  std::vector<cublasLtMatmulAlgo_t> same{algo_};
  {
    std::optional<Probe> probe;  // freed before the timing allocates its operands
    for (const cublasLtMatmulAlgo_t& c : heuristic_candidates(l.x.get(), l.out.get())) {
      bool seen = false;
      for (const cublasLtMatmulAlgo_t& a : same) seen = seen || std::memcmp(&a, &c, sizeof(c)) == 0;
      if (seen) continue;
      if (!probe) probe.emplace(*this, rows);
      if (same_bits_as_anchor(c, *probe)) same.push_back(c);
    }
  }
  l.algo = fastest(same, rows, l.x.get(), l.out.get());
  row_layouts_.push_back(std::move(l));
  rows_ = rows;
}

const BatchInvariantGemm::RowLayouts& BatchInvariantGemm::layouts_of(int64_t rows) const {
  for (const RowLayouts& c : row_layouts_)
    if (c.rows == rows) return c;
  SWAPFFN_INTERNAL("BatchInvariantGemm: " + std::to_string(rows) + " rows were never given to set_rows");
}

void BatchInvariantGemm::run(const void* w, const void* x, void* out, void* workspace, cudaStream_t stream) const {
  SWAPFFN_ASSERT(rows_ > 0, "BatchInvariantGemm::run before set_rows");
  run(rows_, w, x, out, workspace, stream);
}

void BatchInvariantGemm::run(int64_t rows, const void* w, const void* x, void* out, void* workspace,
                             cudaStream_t stream) const {
  const RowLayouts& l = layouts_of(rows);
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, op_.get(), &alpha, w, w_layout_.get(), x, l.x.get(), &beta_, out, l.out.get(), out, l.out.get(),
                              &l.algo, workspace, workspace_bytes_, stream));
}

std::string BatchInvariantGemm::describe() const { return describe_cublaslt_algo(algo_); }

std::string BatchInvariantGemm::describe(int64_t rows) const { return describe_cublaslt_algo(layouts_of(rows).algo); }

}  // namespace swapffn::cuda
