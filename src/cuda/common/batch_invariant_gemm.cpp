#include "cuda/common/batch_invariant_gemm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/runtime/device_buffer.hpp"

namespace swapffn::cuda {

namespace {
// cuBLAS is column-major: out^T [n x rows] = W^T-view [n x k] (op T on the col-major [k x n] view of
// the row-major W) times X^T-view [k x rows] (the row-major X read as col-major, op N). Both operands
// are k-major, the one layout (TN) in which Hopper's fp8 tensor cores take e4m3.
constexpr cublasOperation_t kTransW = CUBLAS_OP_T, kTransX = CUBLAS_OP_N;
// The scale modes of W (cuBLAS's A) and X (cuBLAS's B): blocks, 128x128 blocks of W and 1x128 blocks
// of X along k; rows, a vector along each operand's outer dimension.
int32_t w_scale_mode(fp8::Scaling s) {
  return s == fp8::Scaling::rows ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
}
int32_t x_scale_mode(fp8::Scaling s) {
  return s == fp8::Scaling::rows ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
}
const char* scale_mode_name(int32_t m) {
  return m == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F ? "CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F"
         : m == CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F ? "CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F"
                                                            : "CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F";
}

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
size_t bytes_of(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 1; }
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

std::vector<float> weight_scales(const fp8::ScaledWeight& w) {
  if (w.scaling == fp8::Scaling::rows) return w.scale;
  const int64_t row_blocks = fp8::blocks(w.rows), col_blocks = fp8::blocks(w.cols), stride = weight_scale_stride(w.cols);
  SWAPFFN_ASSERT(w.scale.size() == size_t(row_blocks * col_blocks), "weight_scales: the weight's scales do not match it");
  std::vector<float> out(size_t(row_blocks * stride), 1.0f);
  for (int64_t r = 0; r < row_blocks; ++r)
    std::copy_n(&w.scale[size_t(r * col_blocks)], col_blocks, &out[size_t(r * stride)]);
  return out;
}

BatchInvariantGemm::BatchInvariantGemm(cublasLtHandle_t lt, int64_t n, int64_t k, cudaDataType_t out_type,
                                       bool accumulate, int64_t reference_rows, size_t workspace_bytes,
                                       GemmOperands operands)
    : lt_(lt),
      n_(n),
      k_(k),
      out_type_(out_type),
      beta_(accumulate ? 1.f : 0.f),
      workspace_bytes_(workspace_bytes),
      operands_(operands) {
  SWAPFFN_REQUIRE(n > 0 && k > 0 && reference_rows > 0, "GEMM shape must be positive");
  SWAPFFN_REQUIRE(out_type == CUDA_R_32F || out_type == CUDA_R_16BF, "GEMM output must be fp32 or bf16");
  // cuBLASLt's fp8 kernels need 16-byte aligned rows of both operands.
  SWAPFFN_REQUIRE(!e4m3() || (n % 16 == 0 && k % 16 == 0),
                  what() + ": n and k must be multiples of 16 for e4m3 operands");
  cublasLtMatmulDesc_t op = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  op_.reset(op);
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &kTransW, sizeof(kTransW)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &kTransX, sizeof(kTransX)));
  if (e4m3()) {
    const int32_t wm = w_scale_mode(*operands.e4m3), xm = x_scale_mode(*operands.e4m3);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &wm, sizeof(wm)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &xm, sizeof(xm)));
    placeholder_scales_.upload(std::vector<float>(16, 1.f));
  }
  cublasLtMatrixLayout_t w_layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_layout, e4m3() ? CUDA_R_8F_E4M3 : CUDA_R_16BF,
                                          static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  w_layout_.reset(w_layout);

  const RowLayouts reference = make_row_layouts(reference_rows);
  SWAPFFN_REQUIRE(heuristic_best(reference.x.get(), reference.out.get(), algo_),
                  "cuBLASLt " + std::to_string(cublasLtGetVersion()) + " offers no split-K-free algorithm for the " +
                      what() + " at " + std::to_string(reference_rows) +
                      " rows (this product cannot run batch-invariantly on this GPU and library)");
}

std::string BatchInvariantGemm::what() const {
  const std::string shape = "n=" + std::to_string(n_) + " k=" + std::to_string(k_);
  const std::string out = std::string(out_type_ == CUDA_R_32F ? "fp32" : "bf16") + " out, beta " +
                          (beta_ != 0.f ? "1" : "0");
  if (!e4m3()) return "bf16 GEMM " + shape + " (" + out + ")";
  const fp8::Scaling s = *operands_.e4m3;
  return "e4m3 GEMM " + shape + " with " + fp8::scaling_name(s) + " scales (W: " + scale_mode_name(w_scale_mode(s)) +
         ", X: " + scale_mode_name(x_scale_mode(s)) + "; " + out + ")";
}

std::vector<cublasLtMatmulAlgo_t> BatchInvariantGemm::heuristic_candidates(cublasLtMatrixLayout_t x,
                                                                          cublasLtMatrixLayout_t out) const {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const cublaslt::Preference owns_pref(pref);
  if (e4m3()) {
    // Scale pointers are attributes of the operation: a query sees valid ones, not those of a
    // product run (and freed) before.
    const float* p = placeholder_scales_.get();
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p, sizeof(p)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p, sizeof(p)));
  }
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
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
    SWAPFFN_INTERNAL("cublasLtMatmulAlgoGetHeuristic for the " + what() + " failed: " + cublasGetStatusName(st) +
                     " (" + cublasGetStatusString(st) + ")");
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

void BatchInvariantGemm::matmul(const RowLayouts& l, const cublasLtMatmulAlgo_t& algo, const void* w,
                                const float* w_scale, const void* x, const float* x_scale, void* out, void* workspace,
                                cudaStream_t stream) const {
  if (e4m3()) {
    // Attributes of the operation, set per call: host-only work, and a captured graph keeps each
    // call's pointers.
    SWAPFFN_ASSERT(w_scale && x_scale, "scaled e4m3 product without scales");
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                                sizeof(w_scale)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scale,
                                                sizeof(x_scale)));
  }
  const float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, op_.get(), &alpha, w, w_layout_.get(), x, l.x.get(), &beta_, out, l.out.get(), out,
                              l.out.get(), &algo, workspace, workspace_bytes_, stream));
}

// Random operands of the product at `rows` rows: bf16 uniform in [-0.05, 0.05) (W) and [-1, 1) (X),
// or e4m3 codes over most of the format's range with scales of either sign.
struct BatchInvariantGemm::RandomOperands {
  DeviceBuffer<uint8_t> w, x;
  DeviceBuffer<float> w_scale, x_scale;
  RandomOperands(const BatchInvariantGemm& g, int64_t rows, uint64_t seed) {
    const size_t in_bytes = g.e4m3() ? 1 : 2;
    w.resize(size_t(g.n_ * g.k_) * in_bytes, "random GEMM weights");
    x.resize(size_t(rows * g.k_) * in_bytes, "random GEMM inputs");
    if (g.e4m3()) {
      fill_random_e4m3(w.get(), g.n_ * g.k_, seed, 400.f, nullptr);
      fill_random_e4m3(x.get(), rows * g.k_, seed + 1, 400.f, nullptr);
      const bool per_row = g.operands_.e4m3 == fp8::Scaling::rows;
      const int64_t nw = per_row ? g.n_ : fp8::blocks(g.n_) * weight_scale_stride(g.k_);
      const int64_t nx = per_row ? rows : fp8::blocks(g.k_) * rows;
      w_scale.resize(size_t(nw), "random weight scales");
      x_scale.resize(size_t(nx), "random input scales");
      // Uniform in [-1e-3, 1e-3): signs do not matter to a bitwise comparison or a timing.
      fill_random_f32(w_scale.get(), nw, seed + 2, 1e-3f, nullptr);
      fill_random_f32(x_scale.get(), nx, seed + 3, 1e-3f, nullptr);
    } else {
      fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(w.get()), g.n_ * g.k_, seed, 0.05f, nullptr);
      fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(x.get()), rows * g.k_, seed + 1, 1.f, nullptr);
    }
  }
  // The operands of `from` (at `rows` rows) made to cancel in pairs: the second half of k (whole
  // 128-blocks for block-scaled e4m3, with their scales) repeats the first, W's negated, and the rest
  // (an odd column or block) is zero, so each output is the rounding residue of its summation order
  // alone. Row scales are the same over all of k: they stay as they are.
  RandomOperands(const BatchInvariantGemm& g, int64_t rows, const RandomOperands& from) {
    const bool e4m3 = g.e4m3(), blocks = g.operands_.e4m3 == fp8::Scaling::blocks;
    const int64_t k = g.k_, half = blocks ? fp8::blocks(k) / 2 * fp8::kBlock : k / 2;
    const auto mirror = [&](const DeviceBuffer<uint8_t>& src, DeviceBuffer<uint8_t>& dst, int64_t m, bool negate) {
      const size_t eb = e4m3 ? 1 : 2, row_bytes = size_t(k) * eb;
      std::vector<uint8_t> h(size_t(m) * row_bytes);
      CUDA_CHECK(cudaMemcpy(h.data(), src.get(), h.size(), cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < m; ++r) {
        uint8_t* row = h.data() + size_t(r) * row_bytes;
        std::memcpy(row + half * eb, row, size_t(half) * eb);
        if (negate)  // the sign bit: the top bit of each value's last byte (little-endian bf16)
          for (int64_t j = half; j < 2 * half; ++j) row[size_t(j) * eb + eb - 1] ^= 0x80;
        std::memset(row + 2 * half * eb, 0, size_t(k - 2 * half) * eb);
      }
      dst.upload(h);
    };
    mirror(from.w, w, g.n_, true);
    mirror(from.x, x, rows, false);
    if (!e4m3) return;
    if (!blocks) {
      w_scale.resize(from.w_scale.size(), "random weight scales");
      x_scale.resize(from.x_scale.size(), "random input scales");
      CUDA_CHECK(cudaMemcpy(w_scale.get(), from.w_scale.get(), from.w_scale.size() * sizeof(float),
                            cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(x_scale.get(), from.x_scale.get(), from.x_scale.size() * sizeof(float),
                            cudaMemcpyDeviceToDevice));
      return;
    }
    // Block kb + hb's scales are block kb's.
    const int64_t hb = half / fp8::kBlock, stride = weight_scale_stride(k), kb = fp8::blocks(k);
    std::vector<float> ws(from.w_scale.size()), xs(from.x_scale.size());
    CUDA_CHECK(cudaMemcpy(ws.data(), from.w_scale.get(), ws.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(xs.data(), from.x_scale.get(), xs.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int64_t nb = 0; nb < fp8::blocks(g.n_); ++nb)
      for (int64_t b = hb; b < 2 * hb; ++b) ws[size_t(nb * stride + b)] = ws[size_t(nb * stride + b - hb)];
    for (int64_t b = hb; b < 2 * hb && b < kb; ++b)
      std::copy_n(&xs[size_t((b - hb) * rows)], rows, &xs[size_t(b * rows)]);
    w_scale.upload(ws);
    x_scale.upload(xs);
  }
  void run(const BatchInvariantGemm& g, const RowLayouts& l, const cublasLtMatmulAlgo_t& algo, void* out,
           void* workspace) const {
    g.matmul(l, algo, w.get(), w_scale.get(), x.get(), x_scale.get(), out, workspace, nullptr);
  }
};

bool gemm_log_enabled() {
  const char* v = std::getenv("SWAPFFN_LOG_GEMMS");
  return v && *v && std::strcmp(v, "0") != 0;
}

const cublasLtMatmulAlgo_t& BatchInvariantGemm::fastest(const std::vector<cublasLtMatmulAlgo_t>& algos,
                                                        const RowLayouts& l) const {
  if (algos.size() == 1) return algos.front();
  const size_t out_bytes = size_t(l.rows * n_) * bytes_of(out_type_);
  const RandomOperands ops(*this, l.rows, 0x71e1);
  DeviceBuffer<uint8_t> c(out_bytes), ws(workspace_bytes_);
  CUDA_CHECK(cudaMemset(c.get(), 0, out_bytes));
  const OwnedTimingEvents ev;
  size_t best = 0;
  float best_ms = 0.f;
  // A sample is 10 back-to-back launches between two events: one launch alone carries the ~3-4 us
  // of an event-timed launch, noise of the size of the differences measured, and a one-launch
  // median let engines of one build pick different algorithms for 512 rows (H100). A candidate displaces the anchor (algos[0]) only when it is clearly faster.
  constexpr int kLaunches = 10, kSamples = 5;
  constexpr float kMargin = 0.98f;
  for (size_t i = 0; i < algos.size(); ++i) {
    const auto launch = [&] { ops.run(*this, l, algos[i], c.get(), ws.get()); };
    for (int r = 0; r < 3; ++r) launch();
    std::vector<float> ms;
    for (int r = 0; r < kSamples; ++r) {
      CUDA_CHECK(cudaEventRecord(ev.start, nullptr));
      for (int j = 0; j < kLaunches; ++j) launch();
      CUDA_CHECK(cudaEventRecord(ev.stop, nullptr));
      ms.push_back(ev.elapsed_ms());
    }
    std::sort(ms.begin(), ms.end());
    const float median = ms[kSamples / 2];
    if (gemm_log_enabled())
      std::fprintf(stderr, "%s, %lld rows: %s %.2f us%s\n", what().c_str(), static_cast<long long>(l.rows),
                   describe_cublaslt_algo(algos[i]).c_str(), 1e3f * median / kLaunches, i == 0 ? " (anchor)" : "");
    if (i == 0) {
      best_ms = median;
    } else if (median < best_ms * (best == 0 ? kMargin : 1.f)) {
      best = i;
      best_ms = median;
    }
  }
  return algos[best];
}

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
  RandomOperands random, cancelling;
  DeviceBuffer<uint8_t> c0, zeros, c, ws;  // c: each run's outputs
  std::vector<uint8_t> anchor;             // the anchor's outputs, copied to the host

 private:
  void run(const cublasLtMatmulAlgo_t& algo, const RandomOperands& ops, const DeviceBuffer<uint8_t>& start,
           uint8_t* host_out) const;
};

BatchInvariantGemm::Probe::Probe(const BatchInvariantGemm& owner, int64_t rows)
    : gemm(owner),
      layouts(owner.make_row_layouts(std::min<int64_t>(rows, 1024))),
      out_bytes(size_t(layouts.rows * owner.n_) * bytes_of(owner.out_type_)),
      random(owner, layouts.rows, 0x5eed1),
      cancelling(owner, layouts.rows, random),
      c0(out_bytes),
      zeros(out_bytes),
      c(out_bytes),
      ws(owner.workspace_bytes_) {
  if (gemm.out_type_ == CUDA_R_32F)
    fill_random_f32(reinterpret_cast<float*>(c0.get()), layouts.rows * gemm.n_, 0x5eed3, 1.f, nullptr);
  else
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(c0.get()), layouts.rows * gemm.n_, 0x5eed3, 1.f, nullptr);
  CUDA_CHECK(cudaMemset(zeros.get(), 0, out_bytes));
  anchor = outputs(gemm.algo_);
}

void BatchInvariantGemm::Probe::run(const cublasLtMatmulAlgo_t& algo, const RandomOperands& ops,
                                    const DeviceBuffer<uint8_t>& start, uint8_t* host_out) const {
  CUDA_CHECK(cudaMemcpy(c.get(), start.get(), out_bytes, cudaMemcpyDeviceToDevice));
  ops.run(gemm, layouts, algo, c.get(), ws.get());
  CUDA_CHECK(cudaMemcpy(host_out, c.get(), out_bytes, cudaMemcpyDeviceToHost));
}

std::vector<uint8_t> BatchInvariantGemm::Probe::outputs(const cublasLtMatmulAlgo_t& algo) const {
  std::vector<uint8_t> h(2 * out_bytes);
  run(algo, random, c0, h.data());
  run(algo, cancelling, zeros, h.data() + out_bytes);
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
  return {rows, make(e4m3() ? CUDA_R_8F_E4M3 : CUDA_R_16BF, k_), make(out_type_, n_), {}};
}

void BatchInvariantGemm::set_rows(int64_t rows) {
  SWAPFFN_REQUIRE(rows > 0, "GEMM row count must be positive");
  SWAPFFN_REQUIRE(!e4m3() || rows % 4 == 0, what() + ": " + std::to_string(rows) +
                                                 " rows is not a multiple of 4 (the scales' columns and row offsets "
                                                 "must be 16-byte aligned)");
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
                 " rows of the " + what() + ": " +
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
  l.algo = fastest(same, l);
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
  SWAPFFN_ASSERT(!e4m3(), "the " + what() + " needs its operands' scales");
  const RowLayouts& l = layouts_of(rows);
  matmul(l, l.algo, w, nullptr, x, nullptr, out, workspace, stream);
}

void BatchInvariantGemm::run(int64_t rows, ScaledOperand w, ScaledOperand x, void* out, void* workspace,
                             cudaStream_t stream) const {
  SWAPFFN_ASSERT(e4m3(), "the " + what() + " has no scales");
  const RowLayouts& l = layouts_of(rows);
  matmul(l, l.algo, w.data, w.scale, x.data, x.scale, out, workspace, stream);
}

std::string BatchInvariantGemm::describe() const { return describe_cublaslt_algo(algo_); }

std::string BatchInvariantGemm::describe(int64_t rows) const { return describe_cublaslt_algo(layouts_of(rows).algo); }

}  // namespace swapffn::cuda
