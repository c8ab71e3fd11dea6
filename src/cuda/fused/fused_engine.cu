// Backend `fused`: the token step with the FFN as two Hopper GEMMs that keep the GEMM structure
// (a weight tile loaded once serves 128 core rows) and fuse what surrounds them: the SwiGLU lives in
// the up-projection's epilogue (no [M, 2F] intermediate, no elementwise pass), the residual add in
// the down-projection's (h is updated in place in fp32), and the router's RMSNorm and skinny GEMM
// are one kernel. Per event: router projection, decisions + swap (+ the FFN's RMSNorm), then k_ffn x
// {dual GEMM, down GEMM, RMSNorm}; the last RMSNorm of an event is skipped because the next
// router reads h directly. The GEMMs use programmatic dependent launch. A token step is one CUDA
// graph (GpuEngine), replayed per token.
#include "cuda/backends.hpp"
#include "cuda/fused/fused_config.hpp"
#include "cuda/gpu_engine.hpp"
#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/router_project.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "cuda/tma.hpp"
#include "swapffn/device.hpp"

namespace swapffn::cuda {
namespace {

class FusedEngine final : public GpuEngine {
 public:
  FusedEngine(const Weights& w, const EngineOptions& opt) : GpuEngine(w, opt) {
    w13_.upload(interleave_w13(w.w1, w.w3, cfg_.d_ff, cfg_.d_model));
    w2_.upload(w.w2);
  }
  std::string name() const override { return "fused"; }

 protected:
  void allocate_batch(int64_t batch) override {
    const int64_t M = batch * cfg_.core_count, D = cfg_.d_model, F = cfg_.d_ff;
    kcfg_ = select_fused_config(cfg_, batch, opt_.tune_file, opt_.kernel_config);
    nrm_.resize(size_t(M * D));
    u_.resize(size_t(M * F));
    z_.resize(size_t(M * cfg_.d_router));
    up_ = DualGemmSwigluArgs{make_tma_2d_bf16_sw128(nrm_.get(), M, D, 128, 64),
                             make_tma_2d_bf16_sw128(w13_.get(), 2 * F, D, kcfg_.up.bn, 64), as_nv(u_.get()),
                             int(M), int(2 * F), int(D)};
    down_ = GemmResidualArgs{make_tma_2d_bf16_sw128(u_.get(), M, F, 128, 64),
                             make_tma_2d_bf16_sw128(w2_.get(), D, F, kcfg_.down.bn, 64), h_.get(), int(M), int(D),
                             int(F), cfg_.ffn_residual};
  }

  void enqueue_step(PhaseTimer* timer) override {
    const auto mark = [timer](Phase p) {
      if (timer) timer->mark(p);
    };
    const int64_t B = batch_, C = cfg_.core_count, M = B * C, D = cfg_.d_model;
    const float eps = static_cast<float>(cfg_.norm_eps);
    mark(Phase::elementwise);
    launch_core_film({io_.get(), scale_.get(), shift_.get(), h_.get(), B, C, D, nullptr, nullptr, eps}, stream_);
    for (int64_t e = 0; e < cfg_.n_events; ++e) {
      mark(Phase::router_swap);
      launch_router_project({h_.get(), router_norm_.get(), as_nv(router_w_.get()), z_.get(), M, D, cfg_.d_router, eps},
                            stream_);
      launch_router_select_swap({z_.get(), swap_w_.get(), swap_b_.get(), bank_w_.get(), bank_b_.get(), h_.get(),
                                 as_nv(ram_.get()), map_.get(), io_.get(), static_cast<int>(e), M, D, cfg_.d_router,
                                 cfg_.k_ffn > 0 ? norm_w_.get() : nullptr, as_nv(nrm_.get()), eps},
                                stream_);
      for (int64_t i = 0; i < cfg_.k_ffn; ++i) {
        mark(Phase::ffn_gemm);
        launch_dual_gemm_swiglu(up_, kcfg_.up, stream_, kcfg_.pdl);
        launch_gemm_residual(down_, kcfg_.down, stream_, kcfg_.pdl);
        if (i + 1 < cfg_.k_ffn) {
          mark(Phase::elementwise);
          launch_rmsnorm_bf16(h_.get(), norm_w_.get(), as_nv(nrm_.get()), M, D, eps, stream_);
        }
      }
    }
    mark(Phase::collapse);
    enqueue_collapse_and_advance();
    if (timer) timer->stop();
  }

 private:
  FusedKernelConfig kcfg_;
  DeviceBuffer<bf16> w13_, w2_, nrm_, u_;
  DeviceBuffer<float> z_;
  DualGemmSwigluArgs up_{};
  GemmResidualArgs down_{};
};

}  // namespace

std::unique_ptr<Engine> make_fused_engine(const Weights& w, const EngineOptions& opt) {
  w.cfg.validate();
  check_fused_supports(w.cfg);
  const GpuInfo gpu = query_gpu();
  SWAPFFN_REQUIRE(gpu.is_hopper(), "backend 'fused' needs a Hopper GPU (sm_90): " +
                                       (gpu.present ? gpu.name + " is sm_" + std::to_string(gpu.cc_major) +
                                                          std::to_string(gpu.cc_minor)
                                                    : gpu.why_absent));
  check_router_project_shape(w.cfg.d_model, w.cfg.d_router);
  select_fused_config(w.cfg, 1, opt.tune_file, opt.kernel_config);  // bad cache or override: fail now
  return std::make_unique<FusedEngine>(w, opt);
}

}  // namespace swapffn::cuda
