// Backend `fused`: the token step with the FFN as two GEMMs that keep the GEMM structure (a weight
// tile loaded once serves 128 core rows) and fuse what surrounds them: the SwiGLU lives in our
// Hopper up-projection's epilogue (no [M, 2F] intermediate), the residual add in the down
// projection's (cuBLASLt with beta = 1, h updated in place in fp32). The event heads, row groups and
// RMSNorms around the FFN are FusedEngineBase's. Our kernels are programmatic dependent launches.
#include <string>

#include "cuda/backends.hpp"
#include "cuda/fused/fused_engine_base.hpp"
#include "cuda/kernels/sm90_bf16_dual_gemm_swiglu.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {
namespace {

class FusedEngine final : public FusedEngineBase {
 public:
  FusedEngine(const Weights& w, const EngineOptions& opt) : FusedEngineBase(w, opt) {
    w13_.upload(interleave_w13(w.w1, w.w3, cfg_.d_ff, cfg_.d_model));
    w2_.upload(w.w2);
    down_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, cfg_.d_model, cfg_.d_ff, CUDA_R_32F, cfg_.ffn_residual,
                                                      cfg_.core_count, kGemmWorkspaceBytes);
  }
  std::string name() const override { return "fused"; }

 protected:
  bool allocate_ffn(int64_t) override {
    for (const auto& [r0, rows] : groups_) down_gemm_->set_rows(rows);
    // Per group an intermediate, since the groups run side by side.
    return u_.reserve(groups_.size() * size_t(group_rows_ * cfg_.d_ff), "the SwiGLU outputs");
  }

  void release_ffn() override { u_.release(); }

  void enqueue_ffn(size_t g, int64_t g0, int64_t rows, cudaStream_t stream) override {
    const int64_t D = cfg_.d_model, F = cfg_.d_ff;
    bf16* u = u_.get() + int64_t(g) * group_rows_ * F;
    launch_dual_gemm_swiglu({as_nv(nrm_.get() + g0 * D), as_nv(w13_.get()), as_nv(u), int(rows), int(2 * F), int(D)},
                            kcfg_.up, stream);
    down_gemm_->run(rows, w2_.get(), u, h_.get() + g0 * D, workspace(g), stream);
  }

 private:
  std::unique_ptr<BatchInvariantGemm> down_gemm_;
  DeviceBuffer<bf16> w13_, w2_, u_;  // w13_: W1 and W3 interleaved (interleave_w13)
};

}  // namespace

std::unique_ptr<Engine> make_fused_engine(const Weights& w, const EngineOptions& opt) {
  require_hopper_gpu("fused");
  w.cfg.validate();
  check_fused_supports(w.cfg);
  SWAPFFN_REQUIRE(!opt.fused.pinned.fp8_up && !opt.fused.pinned.fp8_scales,
                  "kernel choices fp8up= and scales= apply to backend 'fused-fp8' only");
  select_fused_config(w.cfg, 1, opt.fused);  // a choice that cannot run: fail now
  return std::make_unique<FusedEngine>(w, opt);
}

}  // namespace swapffn::cuda
