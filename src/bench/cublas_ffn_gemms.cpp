#include "bench/cublas_ffn_gemms.hpp"

#include <cmath>

#include "cuda/common/cublaslt_handles.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"

namespace swapffn::cuda {

namespace {

// PyTorch's cuBLASLt workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

using cublaslt::Layout;

Layout make_layout(int64_t col_major_rows, int64_t cols) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, static_cast<uint64_t>(col_major_rows),
                                          static_cast<uint64_t>(cols), col_major_rows));
  return Layout(l);
}

// out[rows, n] = x[rows, k] W[n, k]^T in cuBLAS's column-major terms: out^T [n x rows] = (W viewed as
// col-major [k x n])^T times (x viewed as col-major [k x rows]).
struct Product {
  Layout w, x, out;
  cublasLtMatmulAlgo_t algo{};

  Product(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t pref, int64_t rows, int64_t n,
          int64_t k, const char* what)
      : w(make_layout(k, n)), x(make_layout(k, rows)), out(make_layout(n, rows)) {
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, w.get(), x.get(), out.get(), out.get(), pref, 1, &res, &found));
    SWAPFFN_REQUIRE(found == 1, std::string("cuBLASLt offers no algorithm for the ") + what + " GEMM at " +
                                    std::to_string(rows) + " rows");
    algo = res.algo;
  }
};


// The model's tensors must have its shapes before they are uploaded into buffers of those shapes.
const Weights& validated(const Weights& w) {
  w.validate();
  return w;
}

}  // namespace

struct CublasFfnGemms::Impl {
  int64_t rows, d, f;
  int64_t ffn_steps;
  OwnedLtHandle lt;
  cublaslt::MatmulDesc op;
  cublaslt::Preference pref;
  DeviceBuffer<__nv_bfloat16> w1, w3, w2, x, gate, up, down;
  DeviceBuffer<uint8_t> workspace;
  std::unique_ptr<Product> gate_up, down_product;

  void matmul(const Product& p, const void* w, const void* in, void* out, cudaStream_t stream) const {
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(lt.h, op.get(), &alpha, w, p.w.get(), in, p.x.get(), &beta, out, p.out.get(), out,
                                p.out.get(), &p.algo, workspace.get(), kWorkspaceBytes, stream));
  }
  // Buffers, random x and the first u, cuBLASLt's picks; the weights are the caller's to fill.
  Impl(int64_t d_model, int64_t d_ff, int64_t steps, int64_t rows, uint64_t seed);
};

CublasFfnGemms::CublasFfnGemms(const Weights& w, int64_t rows, uint64_t seed)
    : impl_(std::make_unique<Impl>(validated(w).cfg.d_model, w.cfg.d_ff, w.cfg.n_events * w.cfg.k_ffn, rows, seed)) {
  impl_->w1.upload(as_nv(w.w1.data()), w.w1.size());
  impl_->w3.upload(as_nv(w.w3.data()), w.w3.size());
  impl_->w2.upload(as_nv(w.w2.data()), w.w2.size());
}

CublasFfnGemms::CublasFfnGemms(int64_t d_model, int64_t d_ff, int64_t ffn_steps, int64_t rows, uint64_t seed)
    : impl_(std::make_unique<Impl>(d_model, d_ff, ffn_steps, rows, seed)) {
  Impl& m = *impl_;
  // Uniform with the random model's standard deviations (docs/MODEL.md: w1, w3 1/sqrt(D), w2
  // 0.5/sqrt(F)); uniform in [-a, a) has a / sqrt(3).
  const float a13 = std::sqrt(3.f / static_cast<float>(d_model)), a2 = 0.5f * std::sqrt(3.f / static_cast<float>(d_ff));
  fill_random_bf16(m.w1.get(), d_ff * d_model, seed + 2, a13, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  fill_random_bf16(m.w3.get(), d_ff * d_model, seed + 3, a13, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  fill_random_bf16(m.w2.get(), d_model * d_ff, seed + 4, a2, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
}

CublasFfnGemms::Impl::Impl(int64_t d_model, int64_t d_ff, int64_t steps, int64_t rows_, uint64_t seed)
    : rows(rows_), d(d_model), f(d_ff), ffn_steps(steps) {
  SWAPFFN_REQUIRE(rows > 0, "cuBLAS FFN GEMMs: the row count must be > 0 (got " + std::to_string(rows) + ")");
  SWAPFFN_REQUIRE(d > 0 && f > 0 && ffn_steps >= 0, "cuBLAS FFN GEMMs: bad model shape");
  Impl& m = *this;
  m.w1.resize(static_cast<size_t>(f * d));
  m.w3.resize(static_cast<size_t>(f * d));
  m.w2.resize(static_cast<size_t>(d * f));
  m.x.resize(static_cast<size_t>(rows * m.d));
  m.gate.resize(static_cast<size_t>(rows * m.f));
  m.up.resize(static_cast<size_t>(rows * m.f));
  m.down.resize(static_cast<size_t>(rows * m.d));
  m.workspace.resize(kWorkspaceBytes);
  fill_random_bf16(m.x.get(), rows * m.d, seed, 1.f, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  // The down GEMM enqueued alone (enqueue_gemm) reads a gate output no gate GEMM has written: start
  // it from defined, non-zero values.
  fill_random_bf16(m.gate.get(), rows * m.f, seed + 1, 1.f, nullptr);
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());

  const cublasLtHandle_t lt = m.lt.h;
  cublasLtMatmulDesc_t op = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  m.op.reset(op);
  const cublasOperation_t tw = CUBLAS_OP_T, tx = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tw, sizeof(tw)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tx, sizeof(tx)));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  m.pref.reset(pref);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                    sizeof(kWorkspaceBytes)));
  m.gate_up = std::make_unique<Product>(lt, op, pref, rows, m.f, m.d, "gate/up");
  m.down_product = std::make_unique<Product>(lt, op, pref, rows, m.d, m.f, "down");
}

void CublasFfnGemms::enqueue_gemm(Gemm g, cudaStream_t stream) const {
  const Impl& m = *impl_;
  switch (g) {
    case Gemm::gate:
      return m.matmul(*m.gate_up, m.w1.get(), m.x.get(), m.gate.get(), stream);
    case Gemm::up:
      return m.matmul(*m.gate_up, m.w3.get(), m.x.get(), m.up.get(), stream);
    case Gemm::down:
      return m.matmul(*m.down_product, m.w2.get(), m.gate.get(), m.down.get(), stream);
  }
}

std::string CublasFfnGemms::algorithm(Gemm g) const {
  return describe_cublaslt_algo(g == Gemm::down ? impl_->down_product->algo : impl_->gate_up->algo);
}

CublasFfnGemms::~CublasFfnGemms() = default;

void CublasFfnGemms::enqueue_step(cudaStream_t stream) const {
  const Impl& m = *impl_;
  for (int64_t s = 0; s < m.ffn_steps; ++s)
    for (const Gemm g : {Gemm::gate, Gemm::up, Gemm::down}) enqueue_gemm(g, stream);
}

int64_t CublasFfnGemms::gemms_per_step() const { return 3 * impl_->ffn_steps; }

std::string CublasFfnGemms::describe() const {
  return "gate/up " + algorithm(Gemm::gate) + "; down " + algorithm(Gemm::down);
}

int64_t CublasFfnGemms::rows() const { return impl_->rows; }
const __nv_bfloat16* CublasFfnGemms::x() const { return impl_->x.get(); }
__nv_bfloat16* CublasFfnGemms::gate() const { return impl_->gate.get(); }
__nv_bfloat16* CublasFfnGemms::up() const { return impl_->up.get(); }
__nv_bfloat16* CublasFfnGemms::down() const { return impl_->down.get(); }

}  // namespace swapffn::cuda
