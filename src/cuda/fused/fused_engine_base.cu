#include "cuda/fused/fused_engine_base.hpp"

#include <algorithm>

#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/folded_event_router.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/router_select_swap.hpp"

namespace swapffn::cuda {

FusedEngineBase::FusedEngineBase(const Weights& w, const EngineOptions& opt) : GpuEngine(w, opt) {
  if (folded_event_router_fits(cfg_.d_model))
    router_fold_.upload(fold_router(widen_bf16(w.router_norm), widen_bf16(w.router_w), widen_bf16(w.router_swap_w),
                                    widen_bf16(w.bank_w), cfg_.d_model, cfg_.d_router));
}

bool FusedEngineBase::allocate_batch(int64_t batch) {
  const int64_t M = batch * cfg_.core_count, D = cfg_.d_model;
  kcfg_ = select_fused_config(cfg_, batch, opt_.fused);
  bool moved = nrm_.reserve(size_t(M * D), "the normed GEMM operand");
  // The cuBLAS head's GEMM and logits exist only while a batch size runs that head.
  if (kcfg_.router == EventHead::cublas) {
    if (!router_gemm_)
      router_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, cfg_.d_router, cfg_.d_model, CUDA_R_32F, false,
                                                          cfg_.core_count, kGemmWorkspaceBytes);
    router_gemm_->set_rows(M);
    moved |= z_.reserve(size_t(M * cfg_.d_router), "the router logits");
  } else {
    moved |= z_.get() != nullptr;
    z_.release();
  }
  groups_ = row_group_ranges(M, kcfg_.row_groups);
  group_rows_ = 0;
  for (const auto& [r0, rows] : groups_) group_rows_ = std::max(group_rows_, rows);
  // Per group a cuBLAS workspace, since the groups run side by side.
  moved |= gemm_workspace_.reserve(groups_.size() * kGemmWorkspaceBytes, "the cuBLAS workspaces");
  while (group_streams_.size() + 1 < groups_.size()) {
    group_streams_.push_back(std::make_unique<OwnedStream>());
    group_done_.push_back(std::make_unique<OwnedEvent>());
  }
  moved |= allocate_ffn(M);
  return moved;
}

void FusedEngineBase::release_batch() {
  nrm_.release();
  z_.release();
  gemm_workspace_.release();
  release_ffn();
}

FfnOperand FusedEngineBase::ffn_operand(size_t g) const {
  return {.bf16 = as_nv(nrm_.get() + groups_[g].first * cfg_.d_model)};
}

bool FusedEngineBase::film_in_head() const { return kcfg_.router == EventHead::folded && cfg_.n_events > 0; }

void FusedEngineBase::enqueue_step() {
  const int64_t B = batch_, C = cfg_.core_count, D = cfg_.d_model;
  const bool cublas_head = kcfg_.router == EventHead::cublas;
  // The folded head's first event does the core broadcast itself (one kernel fewer per step); with
  // the cuBLAS head the FiLM kernel also writes the first router operand rms(h) * router_norm.
  if (!film_in_head())
    launch_core_film({io_.get(), scale_.get(), shift_.get(), h_.get(), B, C, D,
                      cublas_head ? router_norm_.get() : nullptr, cublas_head ? as_nv(nrm_.get()) : nullptr,
                      static_cast<float>(cfg_.norm_eps)},
                     stream_);
  // Row groups run side by side, each on its own stream: a fork and a join of the graph.
  if (groups_.size() > 1) {
    CUDA_CHECK(cudaEventRecord(fork_.e, stream_));
    for (size_t g = 1; g < groups_.size(); ++g) CUDA_CHECK(cudaStreamWaitEvent(group_streams_[g - 1]->s, fork_.e, 0));
  }
  for (size_t g = 0; g < groups_.size(); ++g) enqueue_group_events(g, g > 0 ? group_streams_[g - 1]->s : stream_);
  for (size_t g = 1; g < groups_.size(); ++g) {
    CUDA_CHECK(cudaEventRecord(group_done_[g - 1]->e, group_streams_[g - 1]->s));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, group_done_[g - 1]->e, 0));
  }
  enqueue_collapse_and_advance();
}

void FusedEngineBase::enqueue_group_events(size_t g, cudaStream_t stream) {
  const auto [g0, g_rows] = groups_[g];
  const int64_t M = batch_ * cfg_.core_count, D = cfg_.d_model;
  const float eps = static_cast<float>(cfg_.norm_eps);
  const bool cublas_head = kcfg_.router == EventHead::cublas;
  const float* ffn_gain = cfg_.k_ffn > 0 ? norm_w_.get() : nullptr;
  const FfnOperand ffn_in = ffn_operand(g);
  SWAPFFN_ASSERT(!cublas_head || ffn_in.bf16 == as_nv(nrm_.get()),
                 "the cuBLAS head writes the FFN operand where the router reads its own: nrm_, bf16");
  float* h = h_.get() + g0 * D;
  for (int64_t e = 0; e < cfg_.n_events; ++e) {
    const bool last_event = e + 1 == cfg_.n_events;
    if (cublas_head) {  // one group (select_fused_config)
      // What the swap kernel's RMSNorm feeds next: the FFN, else the next event's router.
      const float* gain = ffn_gain ? ffn_gain : !last_event ? router_norm_.get() : nullptr;
      router_gemm_->run(router_w_.get(), nrm_.get(), z_.get(), workspace(g), stream);
      launch_router_select_swap({z_.get(), swap_w_.get(), swap_b_.get(), bank_w_.get(), bank_b_.get(), h_.get(),
                                 as_nv(ram_.get()), map_.get(), io_.get(), static_cast<int>(e), M, cfg_.core_count, D,
                                 cfg_.d_router,
                                 gain, gain ? as_nv(nrm_.get()) : nullptr, eps},
                                stream);
    } else {
      EventRouterArgs args{h_.get(), swap_b_.get(), bank_b_.get(), as_nv(ram_.get()), map_.get(), io_.get(),
                           static_cast<int>(e), g0, g_rows, M, D, ffn_gain, ffn_gain ? ffn_in : FfnOperand{},
                           eps, router_fold_.get(), cfg_.core_count};
      if (e == 0) {
        args.film_scale = scale_.get();
        args.film_shift = shift_.get();
      }
      launch_folded_event_router(args, stream, /*pdl=*/true);
    }
    for (int64_t i = 0; i < cfg_.k_ffn; ++i) {
      enqueue_ffn(g, g0, g_rows, stream);
      // The operand of the next GEMM: this event's next FFN step, or (cuBLAS head) the next event's
      // router; the folded head and the collapse read h directly.
      if (i + 1 < cfg_.k_ffn)
        launch_rmsnorm(h, norm_w_.get(), ffn_in, g_rows, D, eps, stream, /*pdl=*/true);
      else if (cublas_head && !last_event)
        launch_rmsnorm(h, router_norm_.get(), {.bf16 = as_nv(nrm_.get())}, g_rows, D, eps, stream, /*pdl=*/true);
    }
  }
}

}  // namespace swapffn::cuda
