#include "bench/cublas_ffn_gemms.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "cuda/runtime/cublaslt_handles.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {

namespace {

// PyTorch's cuBLASLt workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

using cublaslt::Layout;

Layout make_layout(cudaDataType_t type, int64_t col_major_rows, int64_t cols) {
  cublasLtMatrixLayout_t l = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(col_major_rows),
                                          static_cast<uint64_t>(cols), col_major_rows));
  return Layout(l);
}

// out[rows, n] = x[rows, k] W[n, k]^T in cuBLAS's column-major terms: out^T [n x rows] = (W viewed as
// col-major [k x n])^T times (x viewed as col-major [k x rows]).
struct Product {
  Layout w, x, out;
  cublasLtMatmulAlgo_t algo{};

  Product(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatmulPreference_t pref, AnchorOperands operands,
          int64_t rows, int64_t n, int64_t k, const char* what)
      : w(make_layout(in_type(operands), k, n)),
        x(make_layout(in_type(operands), k, rows)),
        out(make_layout(CUDA_R_16BF, n, rows)) {
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt, op, w.get(), x.get(), out.get(), out.get(), pref, 1, &res, &found);
    const std::string of = anchor_operands_name(operands) + " " + what +
                           " GEMM at " + std::to_string(rows) + " rows (n=" + std::to_string(n) +
                           " k=" + std::to_string(k) + ")";
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      SWAPFFN_INTERNAL("cublasLtMatmulAlgoGetHeuristic for the " + of + " failed: " + cublasGetStatusName(st));
    SWAPFFN_REQUIRE(found == 1, "cuBLASLt offers no algorithm for the " + of);
    algo = res.algo;
  }
  static cudaDataType_t in_type(AnchorOperands o) { return o.e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_16BF; }
};

// The scales of an e4m3 operand: an input [rows, k] (x, u) or a weight [n, k] (AnchorOperands).
int64_t input_scale_count(AnchorOperands o, int64_t rows, int64_t k) {
  return !o.scaling ? 1 : fp8::row_scale_count(*o.scaling, k) * rows;
}
int64_t weight_scale_count(AnchorOperands o, int64_t n, int64_t k) {
  return !o.scaling ? 1 : o.scaling == fp8::Scaling::rows ? n : fp8::blocks(n) * weight_scale_stride(k);
}

// The scaling an anchor's weights are quantised in; per tensor takes the rows scaling's largest
// scale (a timing anchor: its codes need not be that scale's).
fp8::Scaling scaling_of(AnchorOperands o) { return o.scaling.value_or(fp8::Scaling::rows); }
std::vector<float> weight_scales_as(AnchorOperands o, const fp8::ScaledWeight& q) {
  if (o.scaling) return weight_scales(q);
  return {*std::max_element(q.scale.begin(), q.scale.end())};
}

// The model's tensors must have its shapes before they are uploaded into buffers of those shapes.
const Weights& validated(const Weights& w) {
  w.validate();
  return w;
}

}  // namespace

struct CublasFfnGemms::Impl {
  int64_t rows, d, f;
  int64_t ffn_steps;
  AnchorOperands operands;
  OwnedLtHandle lt;
  cublaslt::MatmulDesc op;
  cublaslt::Preference pref;
  // Weights and inputs as bytes (bf16 or e4m3); the e4m3 ones with their scales (GemmOperands' layouts).
  DeviceBuffer<uint8_t> w1, w3, w2, x, u;
  DeviceBuffer<float> w1_scale, w3_scale, w2_scale, x_scale, u_scale;
  DeviceBuffer<__nv_bfloat16> gate, up, down;
  DeviceBuffer<uint8_t> workspace;
  std::unique_ptr<Product> gate_up, down_product;

  bool e4m3() const { return operands.e4m3; }
  void matmul(const Product& p, const void* w, const float* w_scale, const void* in, const float* in_scale, void* out,
              cudaStream_t stream) const {
    if (e4m3()) set_scales(w_scale, in_scale);
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(lt.h, op.get(), &alpha, w, p.w.get(), in, p.x.get(), &beta, out, p.out.get(), out,
                                p.out.get(), &p.algo, workspace.get(), kWorkspaceBytes, stream));
  }
  // The scale pointers are attributes of the operation (host-only work; a captured graph keeps each
  // call's pointers).
  void set_scales(const float* w_scale, const float* in_scale) const {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof(w_scale)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &in_scale,
                                                sizeof(in_scale)));
  }
  // Uploads one weight: bf16 as it is, or its e4m3 codes and scales.
  void upload(DeviceBuffer<uint8_t>& dst, DeviceBuffer<float>& dst_scale, const std::vector<bf16>& bf16_w,
              const fp8::ScaledWeight* q) {
    if (!e4m3()) {
      dst.upload(reinterpret_cast<const uint8_t*>(bf16_w.data()), bf16_w.size() * sizeof(bf16));
      return;
    }
    dst.upload(q->data);
    dst_scale.upload(weight_scales_as(operands, *q));
  }
  // Buffers, random x (and u), cuBLASLt's picks; the weights are the caller's to fill, before.
  Impl(int64_t d_model, int64_t d_ff, int64_t steps, int64_t rows, uint64_t seed, AnchorOperands operands);
  void pick_algorithms();
};

CublasFfnGemms::CublasFfnGemms(const Weights& w, int64_t rows, uint64_t seed, AnchorOperands operands)
    : impl_(std::make_unique<Impl>(validated(w).cfg.d_model, w.cfg.d_ff, w.cfg.n_events * w.cfg.k_ffn, rows, seed,
                                   operands)) {
  Impl& m = *impl_;
  // The model's own e4m3 weights when they are in the anchor's scaling, else its bf16 ones (an fp8
  // model's dequantised) quantised in it.
  std::optional<fp8::FfnWeights> quantised;
  const bool own = w.fp8_ffn && w.fp8_ffn->scaling() == scaling_of(operands);
  if (m.e4m3() && !own) quantised = fp8::quantize_ffn(scaling_of(operands), w.w1, w.w3, w.w2, m.d, m.f);
  const fp8::FfnWeights* q = !m.e4m3() ? nullptr : own ? &*w.fp8_ffn : &*quantised;
  m.upload(m.w1, m.w1_scale, w.w1, q ? &q->w1 : nullptr);
  m.upload(m.w3, m.w3_scale, w.w3, q ? &q->w3 : nullptr);
  m.upload(m.w2, m.w2_scale, w.w2, q ? &q->w2 : nullptr);
  m.pick_algorithms();
}

CublasFfnGemms::CublasFfnGemms(int64_t d_model, int64_t d_ff, int64_t ffn_steps, int64_t rows, uint64_t seed,
                               AnchorOperands operands)
    : impl_(std::make_unique<Impl>(d_model, d_ff, ffn_steps, rows, seed, operands)) {
  Impl& m = *impl_;
  m.w1.resize(size_t(d_ff * d_model) * (m.e4m3() ? 1 : 2));
  m.w3.resize(size_t(d_ff * d_model) * (m.e4m3() ? 1 : 2));
  m.w2.resize(size_t(d_model * d_ff) * (m.e4m3() ? 1 : 2));
  if (m.e4m3()) {
    // Codes over most of e4m3's range; scales of the model's magnitudes (|w| ~ 0.05) over 448.
    fill_random_e4m3(m.w1.get(), d_ff * d_model, seed + 2, 400.f, nullptr);
    fill_random_e4m3(m.w3.get(), d_ff * d_model, seed + 3, 400.f, nullptr);
    fill_random_e4m3(m.w2.get(), d_model * d_ff, seed + 4, 400.f, nullptr);
    const int64_t n13 = weight_scale_count(operands, d_ff, d_model), n2 = weight_scale_count(operands, d_model, d_ff);
    const auto scales = [](DeviceBuffer<float>& buf, int64_t n, uint64_t s) {
      buf.resize(size_t(n));
      fill_random_f32(buf.get(), n, s, 2e-4f, nullptr);  // of either sign: the products do not care
    };
    scales(m.w1_scale, n13, seed + 5);
    scales(m.w3_scale, n13, seed + 6);
    scales(m.w2_scale, n2, seed + 7);
  } else {
    // Uniform with the random model's standard deviations (docs/MODEL.md: w1, w3 1/sqrt(D), w2
    // 0.5/sqrt(F)); uniform in [-a, a) has a / sqrt(3).
    const float a13 = std::sqrt(3.f / static_cast<float>(d_model)), a2 = 0.5f * std::sqrt(3.f / static_cast<float>(d_ff));
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(m.w1.get()), d_ff * d_model, seed + 2, a13, nullptr);
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(m.w3.get()), d_ff * d_model, seed + 3, a13, nullptr);
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(m.w2.get()), d_model * d_ff, seed + 4, a2, nullptr);
  }
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  m.pick_algorithms();
}

CublasFfnGemms::Impl::Impl(int64_t d_model, int64_t d_ff, int64_t steps, int64_t rows_, uint64_t seed,
                           AnchorOperands operands_)
    : rows(rows_), d(d_model), f(d_ff), ffn_steps(steps), operands(operands_) {
  SWAPFFN_REQUIRE(rows > 0, "cuBLAS FFN GEMMs: the row count must be > 0 (got " + std::to_string(rows) + ")");
  SWAPFFN_REQUIRE(d > 0 && f > 0 && ffn_steps >= 0, "cuBLAS FFN GEMMs: bad model shape");
  // cuBLASLt's fp8: 16-byte aligned rows of the operands and of the 1x128 scales' columns.
  SWAPFFN_REQUIRE(!e4m3() || (d % 16 == 0 && f % 16 == 0 && rows % 4 == 0),
                  "cuBLAS fp8 FFN GEMMs: d_model and d_ff must be multiples of 16 and the rows (" +
                      std::to_string(rows) + ") of 4");
  Impl& m = *this;
  const size_t in_bytes = e4m3() ? 1 : 2;
  m.x.resize(size_t(rows * m.d) * in_bytes);
  m.gate.resize(static_cast<size_t>(rows * m.f));
  m.up.resize(static_cast<size_t>(rows * m.f));
  m.down.resize(static_cast<size_t>(rows * m.d));
  m.workspace.resize(kWorkspaceBytes);
  // The down GEMM enqueued alone (enqueue_gemm) reads a u no GEMM has written: start it from defined,
  // non-zero values.
  if (e4m3()) {
    m.u.resize(size_t(rows * m.f));
    const int64_t nx = input_scale_count(operands, rows, m.d), nu = input_scale_count(operands, rows, m.f);
    m.x_scale.resize(size_t(nx));
    m.u_scale.resize(size_t(nu));
    fill_random_e4m3(m.x.get(), rows * m.d, seed, 400.f, nullptr);
    fill_random_e4m3(m.u.get(), rows * m.f, seed + 1, 400.f, nullptr);
    fill_random_f32(m.x_scale.get(), nx, seed + 8, 1e-2f, nullptr);
    fill_random_f32(m.u_scale.get(), nu, seed + 9, 1e-2f, nullptr);
  } else {
    fill_random_bf16(reinterpret_cast<__nv_bfloat16*>(m.x.get()), rows * m.d, seed, 1.f, nullptr);
    fill_random_bf16(m.gate.get(), rows * m.f, seed + 1, 1.f, nullptr);
  }
  SWAPFFN_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());

  cublasLtMatmulDesc_t desc = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  m.op.reset(desc);
  const cublasOperation_t tw = CUBLAS_OP_T, tx = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &tw, sizeof(tw)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tx, sizeof(tx)));
  if (e4m3()) {
    // cuBLASLt's fp8 matmuls promote to fp32 as they go (no fast accumulation: its default).
    const int32_t w_mode = operands.scaling == fp8::Scaling::blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                           : operands.scaling == fp8::Scaling::rows ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                                                   : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const int32_t x_mode = operands.scaling == fp8::Scaling::blocks ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : w_mode;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &w_mode, sizeof(w_mode)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &x_mode, sizeof(x_mode)));
  }
  cublasLtMatmulPreference_t p = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p));
  m.pref.reset(p);
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                    sizeof(kWorkspaceBytes)));
}

void CublasFfnGemms::Impl::pick_algorithms() {
  if (e4m3()) set_scales(w1_scale.get(), x_scale.get());  // the queries see the scales of real operands
  gate_up = std::make_unique<Product>(lt.h, op.get(), pref.get(), operands, rows, f, d, "gate/up");
  down_product = std::make_unique<Product>(lt.h, op.get(), pref.get(), operands, rows, d, f, "down");
}

void CublasFfnGemms::enqueue_gemm(Gemm g, cudaStream_t stream) const {
  const Impl& m = *impl_;
  switch (g) {
    case Gemm::gate:
      return m.matmul(*m.gate_up, m.w1.get(), m.w1_scale.get(), m.x.get(), m.x_scale.get(), m.gate.get(), stream);
    case Gemm::up:
      return m.matmul(*m.gate_up, m.w3.get(), m.w3_scale.get(), m.x.get(), m.x_scale.get(), m.up.get(), stream);
    case Gemm::down:
      return m.matmul(*m.down_product, m.w2.get(), m.w2_scale.get(), u(), m.u_scale.get(), m.down.get(), stream);
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
AnchorOperands CublasFfnGemms::operands() const { return impl_->operands; }
const void* CublasFfnGemms::x() const { return impl_->x.get(); }
const void* CublasFfnGemms::u() const { return impl_->e4m3() ? static_cast<const void*>(impl_->u.get()) : impl_->gate.get(); }
const float* CublasFfnGemms::x_scale() const { return impl_->x_scale.get(); }
const float* CublasFfnGemms::u_scale() const { return impl_->u_scale.get(); }
const void* CublasFfnGemms::w1() const { return impl_->w1.get(); }
const void* CublasFfnGemms::w2() const { return impl_->w2.get(); }
const float* CublasFfnGemms::w1_scale() const { return impl_->w1_scale.get(); }
const float* CublasFfnGemms::w2_scale() const { return impl_->w2_scale.get(); }
__nv_bfloat16* CublasFfnGemms::gate() const { return impl_->gate.get(); }
__nv_bfloat16* CublasFfnGemms::up() const { return impl_->up.get(); }
__nv_bfloat16* CublasFfnGemms::down() const { return impl_->down.get(); }

}  // namespace swapffn::cuda
