// Backend `fused-fp8`: the fused token step (FusedEngineBase: event heads, row groups, RMSNorms, the
// fp32 residual h) with the FFN in e4m3, a recipe of SPEC section 5's fp8 paths (swapffn/fp8.hpp):
// the model's scaling (a bf16 model's: scales=, blocks by default), fp32 scales, fp32 accumulation.
//   blocks: weights in 128x128 blocks, activations in 1x128 blocks along k;
//   rows: one scale per output channel of a weight and per activation row.
// Per FFN step: the normed operand in e4m3 (the folded head and the RMSNorm quantise the bf16
// values they compute, ffn_operand; the cuBLAS head's bf16 rows are quantised by fp8_quantize_rows,
// since they are also its router's operand); the up projection into e4m3 u (fp8up=cublas:
// cuBLASLt's w1|w3 GEMM into bf16 [rows, 2F], then SwiGLU and quantisation, fp8_swiglu_quantize;
// fp8up=sm90: our kernel, sm90_fp8_dual_gemm_swiglu, with both in its epilogue (blocks), or the
// SwiGLU with u in bf16 [rows, F], then its per-row quantisation (rows)); the w2 GEMM adding into h
// in place (fp32, beta = 1; rows: ours, sm90_fp8_rows_gemm_residual). The cuBLASLt GEMMs are its
// scaled fp8 matmul (Hopper), pinned per shape for batch invariance (BatchInvariantGemm). Its up GEMM
// writes bf16: the output is quantised to e4m3 next, and bf16's rounding (2^-9) is far below e4m3's
// (2^-4) at half the bytes of fp32.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cuda/backends.hpp"
#include "cuda/fused/fused_engine_base.hpp"
#include "cuda/kernels/fp8_quantize_rows.hpp"
#include "cuda/kernels/fp8_swiglu_quantize.hpp"
#include "cuda/kernels/sm90_fp8_dual_gemm_swiglu.hpp"
#include "cuda/kernels/sm90_fp8_rows_gemm_residual.hpp"
#include "cuda/runtime/launch.hpp"
#include "swapffn/error.hpp"
#include "swapffn/fp8.hpp"

namespace swapffn::cuda {
namespace {

class FusedFp8Engine final : public FusedEngineBase {
 public:
  FusedFp8Engine(const Weights& w, const EngineOptions& opt, fp8::Scaling scaling, Fp8UpGemm up)
      : FusedEngineBase(w, opt), scaling_(scaling), up_(up) {
    const int64_t D = cfg_.d_model, F = cfg_.d_ff, C = cfg_.core_count;
    // The model's own e4m3 weights when it has them (Weights::validate checked their shapes and
    // scales), else the recipe applied to its bf16 ones.
    std::optional<fp8::FfnWeights> quantised;
    if (!w.fp8_ffn) quantised = fp8::quantize_ffn(scaling, w.w1, w.w3, w.w2, D, F);
    const fp8::FfnWeights& q = w.fp8_ffn ? *w.fp8_ffn : *quantised;
    // cuBLASLt's up GEMM runs over [W1; W3] (rows [0, F) gate, [F, 2F) up); ours reads them interleaved
    // in blocks of 8 rows. Scales: W1's, then W3's (F % 128 == 0: the 128-row blocks do not straddle;
    // per channel, rows [0, F) then [F, 2F), as the GEMM's output channels are).
    std::vector<uint8_t> w13;
    if (up_ == Fp8UpGemm::sm90) {
      w13 = interleave_w13_e4m3(q.w1.data, q.w3.data, F, D);
    } else {
      w13 = q.w1.data;
      w13.insert(w13.end(), q.w3.data.begin(), q.w3.data.end());
    }
    std::vector<float> w13_scale = weight_scales(q.w1);
    const std::vector<float> w3_scale = weight_scales(q.w3);
    w13_scale.insert(w13_scale.end(), w3_scale.begin(), w3_scale.end());
    w13_.upload(w13);
    w13_scale_.upload(w13_scale);
    w2_.upload(q.w2.data);
    w2_scale_.upload(weight_scales(q.w2));
    if (up_ == Fp8UpGemm::cublas)
      up_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, 2 * F, D, CUDA_R_16BF, false, C, kGemmWorkspaceBytes,
                                                      GemmOperands::scaled_e4m3(scaling));
    // rows: our w2 GEMM (no promotion, so its tile follows the row count at the same bits); blocks:
    // cuBLASLt's, pinned for batch invariance.
    if (scaling == fp8::Scaling::blocks)
      down_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, D, F, CUDA_R_32F, cfg_.ffn_residual, C,
                                                        kGemmWorkspaceBytes, GemmOperands::scaled_e4m3(scaling));
    if (gemm_log_enabled())
      std::fprintf(stderr, "fused-fp8 (scaling %s): w1|w3 GEMM %s\nfused-fp8: w2 GEMM %s\n", fp8::scaling_name(scaling),
                   up_gemm_ ? up_gemm_->describe().c_str() : "sm90_fp8_dual_gemm_swiglu",
                   down_gemm_ ? down_gemm_->describe().c_str() : "sm90_fp8_rows_gemm_residual");
  }
  std::string name() const override { return "fused-fp8"; }
  Precision precision() const override { return Precision::fp8; }

 protected:
  bool allocate_ffn(int64_t rows) override {
    const int64_t D = cfg_.d_model, F = cfg_.d_ff;
    for (const auto& [r0, n] : groups_) {
      if (up_gemm_) up_gemm_->set_rows(n);
      if (!down_gemm_) continue;
      down_gemm_->set_rows(n);
      if (gemm_log_enabled())
        std::fprintf(stderr, "fused-fp8: %lld rows: w2 GEMM %s\n", static_cast<long long>(n),
                     down_gemm_->describe(n).c_str());
    }
    // Indexed by row (each group uses its own rows), the scales of a group's rows in its own
    // [scales per row, rows] block at the group's first row times the scales per row.
    bool moved = xq_.reserve(size_t(rows * D), "the quantised FFN operand");
    moved |= xs_.reserve(size_t(rows * fp8::row_scale_count(scaling_, D)), "the FFN operand's scales");
    if (up_gemm_) moved |= gu_.reserve(size_t(rows * 2 * F), "the gate and up projections");
    if (!up_gemm_ && scaling_ == fp8::Scaling::rows)
      moved |= ub_.reserve(size_t(rows * F), "the SwiGLU output in bf16");
    moved |= uq_.reserve(size_t(rows * F), "the quantised SwiGLU output");
    moved |= us_.reserve(size_t(rows * fp8::row_scale_count(scaling_, F)), "the SwiGLU output's scales");
    return moved;
  }

  void release_ffn() override {
    xq_.release();
    xs_.release();
    gu_.release();
    ub_.release();
    uq_.release();
    us_.release();
  }

  FfnOperand ffn_operand(size_t g) const override {
    if (kcfg_.router == EventHead::cublas) return FusedEngineBase::ffn_operand(g);
    const int64_t g0 = groups_[g].first, D = cfg_.d_model;
    return {.e4m3 = xq_.get() + g0 * D,
            .scales = xs_.get() + g0 * fp8::row_scale_count(scaling_, D),
            .per_row = scaling_ == fp8::Scaling::rows};
  }

  void enqueue_ffn(size_t g, int64_t g0, int64_t rows, cudaStream_t stream) override {
    const int64_t D = cfg_.d_model, F = cfg_.d_ff;
    uint8_t* xq = xq_.get() + g0 * D;
    float* xs = xs_.get() + g0 * fp8::row_scale_count(scaling_, D);
    bf16* gu = gu_.get() + g0 * 2 * F;  // the cuBLASLt up GEMM's
    uint8_t* uq = uq_.get() + g0 * F;
    float* us = us_.get() + g0 * fp8::row_scale_count(scaling_, F);
    if (const FfnOperand in = ffn_operand(g); in.bf16)  // the head's bf16 rows
      launch_quantize_rows_e4m3(scaling_, in.bf16, rows, D, xq, xs, stream, /*pdl=*/true);
    if (up_ == Fp8UpGemm::sm90 && scaling_ == fp8::Scaling::rows) {
      bf16* ub = ub_.get() + g0 * F;
      launch_fp8_dual_gemm_swiglu({.scaling = scaling_, .x = xq, .x_scale = xs, .w13 = w13_.get(),
                                   .w1_scale = w13_scale_.get(), .w3_scale = w13_scale_.get() + F, .scale_stride = 0,
                                   .u = nullptr, .u_scale = nullptr, .u_bf16 = as_nv(ub), .m = int(rows), .f = int(F),
                                   .k = int(D)},
                                  stream);
      launch_quantize_rows_e4m3(scaling_, as_nv(ub), rows, F, uq, us, stream, /*pdl=*/true);
    } else if (up_ == Fp8UpGemm::sm90) {
      const int64_t stride = weight_scale_stride(D);
      launch_fp8_dual_gemm_swiglu({.scaling = scaling_, .x = xq, .x_scale = xs, .w13 = w13_.get(),
                                   .w1_scale = w13_scale_.get(), .w3_scale = w13_scale_.get() + fp8::blocks(F) * stride,
                                   .scale_stride = int(stride), .u = uq, .u_scale = us, .u_bf16 = nullptr,
                                   .m = int(rows), .f = int(F), .k = int(D)},
                                  stream);
    } else {
      up_gemm_->run(rows, ScaledOperand{w13_.get(), w13_scale_.get()}, ScaledOperand{xq, xs}, gu, workspace(g),
                    stream);
      launch_swiglu_quantize_e4m3(scaling_, as_nv(gu), rows, F, uq, us, stream, /*pdl=*/true);
    }
    if (down_gemm_) {
      down_gemm_->run(rows, ScaledOperand{w2_.get(), w2_scale_.get()}, ScaledOperand{uq, us}, h_.get() + g0 * D,
                      workspace(g), stream);
    } else {
      launch_fp8_rows_gemm({.a = uq, .a_scale = us, .w = w2_.get(), .w_scale = w2_scale_.get(), .h = h_.get() + g0 * D,
                            .m = int(rows), .n = int(D), .k = int(F), .residual = cfg_.ffn_residual},
                           fp8_rows_gemm_tile(rows, D, sms_), stream);
    }
  }

 private:
  fp8::Scaling scaling_;
  int sms_ = sm_count();
  Fp8UpGemm up_;                                       // at every batch size (select_fused_config)
  std::unique_ptr<BatchInvariantGemm> up_gemm_, down_gemm_;  // up_gemm_: fp8up=cublas only; down_gemm_: blocks
  DeviceBuffer<uint8_t> w13_, w2_;           // e4m3 [2F, D] ([W1; W3], or interleaved for sm90) and [D, F]
  DeviceBuffer<float> w13_scale_, w2_scale_;  // their scales (weight_scales' layout)
  DeviceBuffer<uint8_t> xq_, uq_;             // e4m3 [M, D] and [M, F]
  DeviceBuffer<float> xs_, us_;               // their scales
  DeviceBuffer<bf16> gu_;                     // [M, 2F] (fp8up=cublas)
  DeviceBuffer<bf16> ub_;                     // [M, F] (fp8up=sm90 in the rows scaling)
};

}  // namespace

std::unique_ptr<Engine> make_fused_fp8_engine(const Weights& w, const EngineOptions& opt) {
  require_hopper_gpu("fused-fp8");
  w.cfg.validate();
  check_fused_supports(w.cfg, "fused-fp8");
  const auto need = [](bool ok, const std::string& what) {
    SWAPFFN_REQUIRE(ok, "backend 'fused-fp8' cannot run this config: " + what + " (use backend 'fused')");
  };
  need(w.cfg.d_ff % fp8::kBlock == 0, "d_ff = " + std::to_string(w.cfg.d_ff) +
                                          " is not a multiple of 128 (whole 1x128 blocks of the SwiGLU output)");
  need(w.cfg.core_count % 4 == 0, "core_count = " + std::to_string(w.cfg.core_count) +
                                      " is not a multiple of 4 (cuBLASLt's 1x128 scales need row counts that are)");
  SWAPFFN_REQUIRE(!opt.fused.pinned.up && opt.fused.tuned.empty(),
                  "backend 'fused-fp8' takes the kernel choices router=, groups=, fp8up= and scales= only (no dual "
                  "GEMM tile, no tuning cache)");
  // The model's scaling, or for a bf16 model the one pinned (blocks by default).
  const std::optional<fp8::Scaling> pinned = opt.fused.pinned.fp8_scales;
  const fp8::Scaling scaling = w.fp8_ffn ? w.fp8_ffn->scaling() : pinned.value_or(fp8::Scaling::blocks);
  SWAPFFN_REQUIRE(!pinned || *pinned == scaling, std::string("kernel choice scales=") + fp8::scaling_name(*pinned) +
                                                     ": the model's FFN is stored in fp8 with scaling '" +
                                                     fp8::scaling_name(scaling) + "'");
  const FusedKernelConfig k = select_fused_config(w.cfg, 1, opt.fused);  // a choice that cannot run: fail now
  return std::make_unique<FusedFp8Engine>(w, opt, scaling, k.fp8_up);
}

}  // namespace swapffn::cuda
