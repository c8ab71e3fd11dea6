// Backend `unfused`: SPEC section 4 op by op on the GPU, M = B*C rows at a time. GEMMs go through
// cuBLASLt (bf16 operands, fp32 accumulation, algorithm pinned per shape for batch invariance);
// the rest are the row kernels of src/cuda/kernels. The residual stream h stays fp32 on the device.
// The plumbing (device state, StepIO, CUDA graph capture and replay, host entry points) is
// GpuEngine's; this file is the token step.
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/backends.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/kernels/step_io.hpp"
#include "cuda/kernels/swiglu.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

class UnfusedEngine final : public GpuEngine {
 public:
  UnfusedEngine(const Weights& w, const EngineOptions& opt);
  std::string name() const override { return "unfused"; }

 protected:
  bool allocate_batch(int64_t batch) override;
  void release_batch() override;
  void enqueue_step() override;

 private:
  OwnedLtHandle owned_lt_;
  cublasLtHandle_t lt_ = owned_lt_.h;
  DeviceBuffer<bf16> w13_, w2_, nrm_, gu_, u_;
  DeviceBuffer<float> z_;
  DeviceBuffer<uint8_t> gemm_workspace_;
  std::unique_ptr<BatchInvariantGemm> router_gemm_, up_gemm_, down_gemm_;
};

UnfusedEngine::UnfusedEngine(const Weights& w, const EngineOptions& opt) : GpuEngine(w, opt) {
  const int64_t D = cfg_.d_model, F = cfg_.d_ff, C = cfg_.core_count, R = cfg_.d_router;
  std::vector<bf16> w13(w.w1);
  w13.insert(w13.end(), w.w3.begin(), w.w3.end());  // one GEMM for gate and up: rows [w1; w3]
  w13_.upload(w13);
  w2_.upload(w.w2);
  gemm_workspace_.resize(kGemmWorkspaceBytes);
  // Algorithms pinned at the one-sequence row count (B = 1), the latency case.
  router_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, R, D, CUDA_R_32F, false, C, kGemmWorkspaceBytes);
  up_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, 2 * F, D, CUDA_R_16BF, false, C, kGemmWorkspaceBytes);
  down_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, D, F, CUDA_R_32F, cfg_.ffn_residual, C, kGemmWorkspaceBytes);
  if (gemm_log_enabled())
    std::fprintf(stderr, "unfused: router GEMM %s\nunfused: w1|w3 GEMM %s\nunfused: w2 GEMM %s\n",
                 router_gemm_->describe().c_str(), up_gemm_->describe().c_str(), down_gemm_->describe().c_str());
}

bool UnfusedEngine::allocate_batch(int64_t batch) {
  const int64_t D = cfg_.d_model, F = cfg_.d_ff, M = batch * cfg_.core_count;
  router_gemm_->set_rows(M);
  up_gemm_->set_rows(M);
  down_gemm_->set_rows(M);
  if (gemm_log_enabled())
    std::fprintf(stderr, "unfused: %lld rows: router %s\nunfused: %lld rows: w1|w3 %s\nunfused: %lld rows: w2 %s\n",
                 static_cast<long long>(M), router_gemm_->describe(M).c_str(), static_cast<long long>(M),
                 up_gemm_->describe(M).c_str(), static_cast<long long>(M), down_gemm_->describe(M).c_str());
  const auto m = static_cast<size_t>(M);
  bool moved = z_.reserve(m * cfg_.d_router, "the router logits");
  moved |= nrm_.reserve(m * D, "the normed GEMM operand");
  moved |= gu_.reserve(m * 2 * F, "the gate and up projections");
  moved |= u_.reserve(m * F, "the SwiGLU output");
  return moved;
}

void UnfusedEngine::release_batch() {
  z_.release();
  nrm_.release();
  gu_.release();
  u_.release();
}

void UnfusedEngine::enqueue_step() {
  const int64_t B = batch_, C = cfg_.core_count, M = B * C, D = cfg_.d_model, E = cfg_.n_events;
  const float eps = static_cast<float>(cfg_.norm_eps);
  void* ws = gemm_workspace_.get();

  const auto norm_out = [this](const float* gain) { return gain ? as_nv(nrm_.get()) : nullptr; };
  const float* film_gain = E > 0 ? router_norm_.get() : nullptr;
  launch_core_film({io_.get(), scale_.get(), shift_.get(), h_.get(), B, C, D, film_gain, norm_out(film_gain), eps},
                   stream_);
  for (int64_t e = 0; e < E; ++e) {
    const bool last_event = e + 1 == E;
    // The norm each kernel leaves behind is the operand of the next GEMM: FFN (norm.weight),
    // the next event's router (router_norm), or none before the collapse.
    const float* after_ffn_gain = last_event ? nullptr : router_norm_.get();
    router_gemm_->run(router_w_.get(), nrm_.get(), z_.get(), ws, stream_);
    const float* after_swap_gain = cfg_.k_ffn > 0 ? norm_w_.get() : after_ffn_gain;
    launch_router_select_swap({z_.get(), swap_w_.get(), swap_b_.get(), bank_w_.get(), bank_b_.get(), h_.get(),
                               as_nv(ram_.get()), map_.get(), io_.get(), static_cast<int>(e), M, cfg_.core_count, D,
                               cfg_.d_router, after_swap_gain, norm_out(after_swap_gain), eps},
                              stream_);
    for (int64_t i = 0; i < cfg_.k_ffn; ++i) {
      up_gemm_->run(w13_.get(), nrm_.get(), gu_.get(), ws, stream_);
      launch_swiglu(as_nv(gu_.get()), as_nv(u_.get()), M, cfg_.d_ff, stream_);
      down_gemm_->run(w2_.get(), u_.get(), h_.get(), ws, stream_);
      const float* gain = i + 1 < cfg_.k_ffn ? norm_w_.get() : after_ffn_gain;
      if (gain) {
        launch_rmsnorm(h_.get(), gain, {.bf16 = as_nv(nrm_.get())}, M, D, eps, stream_);
      }
    }
  }
  enqueue_collapse_and_advance();
}

}  // namespace

std::unique_ptr<Engine> make_unfused_engine(const Weights& w, const EngineOptions& opt) {
  require_hopper_gpu("unfused");
  return std::make_unique<UnfusedEngine>(w, opt);
}

}  // namespace swapffn::cuda
