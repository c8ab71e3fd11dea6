// Backend `fused`: the token step with the FFN as two Hopper GEMMs that keep the GEMM structure
// (a weight tile loaded once serves 128 core rows) and fuse what surrounds them: the SwiGLU lives in
// the up-projection's epilogue (no [M, 2F] intermediate, no elementwise pass) and the residual add
// in the down-projection's (h is updated in place in fp32; by default through cuBLASLt's beta = 1,
// which measured faster than our split-K kernel and CUTLASS's, see fused_config.cpp). The step
// starts with the core broadcast (FiLM; the folded router's first event does it itself). Per event:
// the event head (by default the folded event router: five dot products per row in place of the
// router GEMM, then decisions, swap and the FFN's RMSNorm; or the one-kernel MMA event router; or
// the cuBLASLt router GEMM and the decision/swap kernel), then k_ffn x {dual GEMM, down GEMM,
// RMSNorm of the next GEMM's operand}. Our kernels use programmatic dependent launch. A token step
// is one CUDA graph (GpuEngine); with row groups (FusedKernelConfig::row_groups) each group's
// events are a branch of it on their own stream.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/backends.hpp"
#include "cuda/fused/fused_config.hpp"
#include "cuda/common/gpu_engine.hpp"
#include "cuda/l2_window.hpp"
#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/event_router.hpp"
#include "cuda/kernels/folded_event_router.hpp"
#include "cuda/kernels/random_fill.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/common/batch_invariant_gemm.hpp"
#include "cuda/kernels/sm90_bf16_gemm_residual_cutlass.hpp"
#include "cuda/kernels/sm90_gemm_launch.hpp"
#include "swapffn/device.hpp"

namespace swapffn::cuda {
namespace {

class FusedEngine final : public GpuEngine {
 public:
  FusedEngine(const Weights& w, const EngineOptions& opt) : GpuEngine(w, opt), left_out_(parse_leave_out(opt.leave_out)) {
    // W13 then W2 in one allocation, so that one L2 window can cover both (l2_weights).
    const std::vector<bf16> w13 = interleave_w13(w.w1, w.w3, cfg_.d_ff, cfg_.d_model);
    ffn_w_.resize(w13.size() + w.w2.size());
    CUDA_CHECK(cudaMemcpy(ffn_w_.get(), w13.data(), w13.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(w2(), w.w2.data(), w.w2.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    router_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, cfg_.d_router, cfg_.d_model, CUDA_R_32F, false,
                                                        cfg_.core_count, kGemmWorkspaceBytes);
    down_gemm_ = std::make_unique<BatchInvariantGemm>(lt_.h, cfg_.d_model, cfg_.d_ff, CUDA_R_32F, cfg_.ffn_residual,
                                                      cfg_.core_count, kGemmWorkspaceBytes);
    router_fold_.upload(fold_router(widen_bf16(w.router_norm), widen_bf16(w.router_w), widen_bf16(w.router_swap_w),
                                    widen_bf16(w.bank_w), cfg_.d_model, cfg_.d_router));
  }
  std::string name() const override { return "fused"; }

 protected:
  void allocate_batch(int64_t batch) override {
    const int64_t M = batch * cfg_.core_count, D = cfg_.d_model, F = cfg_.d_ff;
    kcfg_ = select_fused_config(cfg_, batch, opt_.tune_file, opt_.kernel_config);
    SWAPFFN_REQUIRE(!(left_out_.film && film_in_head()),
                    "leave_out=film: with the folded router the first event's head does the core broadcast, so "
                    "there is no FiLM kernel to leave out (leave out 'router')");
    if (kcfg_.router == "event") check_event_router_shape(D, cfg_.d_router);
    if (kcfg_.router == "folded") check_folded_event_router_shape(D);
    nrm_.resize(size_t(M * D));
    router_gemm_->set_rows(M);
    groups_ = row_group_ranges(M, kcfg_.row_groups);
    chunk_ = 0;
    for (const auto& [r0, rows] : groups_) {
      const int64_t chunk = chunk_rows(rows);
      if (rows % chunk) down_gemm_->set_rows(rows % chunk);
      down_gemm_->set_rows(chunk);
      chunk_ = std::max(chunk_, chunk);
    }
    z_.resize(size_t(M * cfg_.d_router));
    // Per group: one chunk's intermediate (reused by the group's chunks) and a cuBLAS workspace,
    // since the groups run side by side.
    u_.resize(size_t(groups_.size()) * size_t(chunk_ * F));
    if (left_out_.any()) {
      // Timing diagnostics: a left-out kernel no longer writes what the rest of the step reads, and
      // fresh buffers hold zeros, on which the GEMMs run faster and draw less power than on real
      // data (at B >= 16 the clock follows the power). So the operands a left-out head, RMSNorm or
      // dual GEMM would have written start random (never zeros), as the tuner's GEMM timings do.
      fill_random_f32(h_.get(), M * D, 0x5eed1, 1.f, stream_);
      fill_random_bf16(as_nv(nrm_.get()), M * D, 0x5eed2, 1.f, stream_);
      fill_random_bf16(as_nv(u_.get()), int64_t(u_.size()), 0x5eed3, 0.5f, stream_);
    }
    gemm_workspace_.resize(groups_.size() * kGemmWorkspaceBytes);
    while (group_streams_.size() + 1 < groups_.size()) {
      group_streams_.push_back(std::make_unique<OwnedStream>());
      group_done_.push_back(std::make_unique<OwnedEvent>());
    }
    if (kcfg_.l2_weights <= 0) {
      l2_window_.reset();
    } else if (!l2_window_ || l2_window_->hit_fraction() != kcfg_.l2_weights) {
      l2_window_.reset();
      l2_window_ = std::make_unique<L2Window>(ffn_w_.get(), ffn_w_.size() * sizeof(bf16), kcfg_.l2_weights);
    }
    // The graph's kernel nodes get the window at capture; eager steps take it from their streams.
    for (cudaStream_t s : all_streams()) {
      if (l2_window_)
        l2_window_->apply(s);
      else
        L2Window::clear(s);
    }
    if (const char* v = std::getenv("SWAPFFN_LOG_GEMMS"); v && *v && std::strcmp(v, "0") != 0) {
      const std::string down = kcfg_.down_cublas            ? "cuBLASLt " + down_gemm_->describe(chunk_)
                               : kcfg_.down_cutlass.empty() ? kcfg_.down.name()
                                                            : "CUTLASS " + kcfg_.down_cutlass;
      std::fprintf(stderr, "fused B=%lld: up %s, down %s, router %s, %zu row group(s)%s\n", static_cast<long long>(batch),
                   kcfg_.up.name().c_str(), down.c_str(), kcfg_.router.c_str(), groups_.size(),
                   l2_window_ ? (", FFN weights in an L2 window, hit ratio " +
                                 std::to_string(l2_window_->window().hitRatio) + ", carve-out " +
                                 std::to_string(l2_window_->carve_out_bytes() >> 20) + " of at most " +
                                 std::to_string(l2_window_->max_carve_out_bytes() >> 20) + " MiB")
                                    .c_str()
                              : "");
    }
  }

  void enqueue_step(PhaseTimer* timer) override {
    const auto mark = [timer](Phase p) {
      if (timer) timer->mark(p);
    };
    const int64_t B = batch_, C = cfg_.core_count, D = cfg_.d_model;
    const bool cublas_router = kcfg_.router == "cublas";
    // The folded router's first event does the core broadcast itself (one kernel fewer per step).
    // With the cuBLAS router the FiLM kernel also writes the first router operand rms(h)*router_norm.
    if (!film_in_head() && !left_out_.film) {
      mark(Phase::elementwise);
      launch_core_film({io_.get(), scale_.get(), shift_.get(), h_.get(), B, C, D,
                        cublas_router ? router_norm_.get() : nullptr, cublas_router ? as_nv(nrm_.get()) : nullptr,
                        static_cast<float>(cfg_.norm_eps)},
                       stream_);
    }
    // Row groups run side by side, each on its own stream (a fork and a join of the graph); under
    // the phase timer one after another on stream_, so that each phase's marks bracket its kernels.
    const bool side_by_side = groups_.size() > 1 && !timer;
    if (side_by_side) {
      CUDA_CHECK(cudaEventRecord(fork_.e, stream_));
      for (size_t g = 1; g < groups_.size(); ++g) CUDA_CHECK(cudaStreamWaitEvent(group_streams_[g - 1]->s, fork_.e, 0));
    }
    for (size_t g = 0; g < groups_.size(); ++g)
      enqueue_group_events(g, side_by_side && g > 0 ? group_streams_[g - 1]->s : stream_, mark);
    if (side_by_side) {
      for (size_t g = 1; g < groups_.size(); ++g) {
        CUDA_CHECK(cudaEventRecord(group_done_[g - 1]->e, group_streams_[g - 1]->s));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, group_done_[g - 1]->e, 0));
      }
    }
    mark(Phase::collapse);
    if (!left_out_.collapse) enqueue_collapse_and_advance();
    if (timer) timer->stop();
  }

 private:
  // Whether the first event's head (the folded router) does the core broadcast; with no events the
  // FiLM kernel still runs.
  bool film_in_head() const { return kcfg_.router == "folded" && cfg_.n_events > 0; }
  bf16* w13() const { return ffn_w_.get(); }
  bf16* w2() const { return ffn_w_.get() + 2 * cfg_.d_ff * cfg_.d_model; }
  std::vector<cudaStream_t> all_streams() const {
    std::vector<cudaStream_t> s{stream_};
    for (const auto& g : group_streams_) s.push_back(g->s);
    return s;
  }

  // Rows per FFN chunk of a group of `rows` rows (FusedKernelConfig::row_chunk, else all of them).
  int64_t chunk_rows(int64_t rows) const { return kcfg_.row_chunk > 0 && kcfg_.row_chunk < rows ? kcfg_.row_chunk : rows; }

  // Every event of row group g (its rows [g0, g0 + g_rows)) on `stream`: the event head, then per
  // chunk of the group's rows all FFN steps.
  template <class Mark>
  void enqueue_group_events(size_t g, cudaStream_t stream, const Mark& mark) {
    const auto [g0, g_rows] = groups_[g];
    const int64_t M = batch_ * cfg_.core_count, D = cfg_.d_model, F = cfg_.d_ff;
    const float eps = static_cast<float>(cfg_.norm_eps);
    const bool cublas_router = kcfg_.router == "cublas";
    const float* ffn_gain = cfg_.k_ffn > 0 ? norm_w_.get() : nullptr;
    const auto after_swap_gain = [&](int64_t e) {  // what the swap kernel's RMSNorm feeds next
      if (ffn_gain || !cublas_router) return ffn_gain;
      return e + 1 < cfg_.n_events ? router_norm_.get() : static_cast<const float*>(nullptr);
    };
    bf16* u = u_.get() + int64_t(g) * chunk_ * F;
    uint8_t* workspace = gemm_workspace_.get() + g * kGemmWorkspaceBytes;
    for (int64_t e = 0; e < cfg_.n_events; ++e) {
      mark(Phase::router_swap);
      if (left_out_.router) {
        // timing diagnostics (EngineOptions::leave_out): no head, and no core broadcast in it
      } else if (cublas_router) {  // one group (select_fused_config)
        router_gemm_->run(router_w_.get(), nrm_.get(), z_.get(), workspace, stream);
        launch_router_select_swap({z_.get(), swap_w_.get(), swap_b_.get(), bank_w_.get(), bank_b_.get(), h_.get(),
                                   as_nv(ram_.get()), map_.get(), io_.get(), static_cast<int>(e), M, D, cfg_.d_router,
                                   after_swap_gain(e), after_swap_gain(e) ? as_nv(nrm_.get()) : nullptr, eps},
                                  stream);
      } else {
        EventRouterArgs args{h_.get(), router_norm_.get(), as_nv(router_w_.get()), swap_w_.get(), swap_b_.get(),
                             bank_w_.get(), bank_b_.get(), as_nv(ram_.get()), map_.get(), io_.get(),
                             static_cast<int>(e), g0, g_rows, M, D, cfg_.d_router, ffn_gain,
                             ffn_gain ? as_nv(nrm_.get()) : nullptr, eps, router_fold_.get()};
        if (kcfg_.router == "folded") {
          if (e == 0 && film_in_head()) {
            args.film_scale = scale_.get();
            args.film_shift = shift_.get();
            args.cores = cfg_.core_count;
          }
          launch_folded_event_router(args, stream, kcfg_.pdl);
        } else
          launch_event_router(args, stream, kcfg_.pdl, kcfg_.router_grid);
      }
      const int64_t chunk = chunk_rows(g_rows);
      for (int64_t r0 = g0; r0 < g0 + g_rows; r0 += chunk) {  // a chunk runs all its FFN steps, then the next
        const int64_t rows = std::min(chunk, g0 + g_rows - r0);
        bf16* nrm = nrm_.get() + r0 * D;
        float* h = h_.get() + r0 * D;
        for (int64_t i = 0; i < cfg_.k_ffn; ++i) {
          mark(Phase::ffn_gemm);
          if (!left_out_.dual)
            launch_dual_gemm_swiglu({as_nv(nrm), as_nv(w13()), as_nv(u), int(rows), int(2 * F), int(D)}, kcfg_.up,
                                    stream, kcfg_.pdl);
          if (left_out_.down) {
            // timing diagnostics (EngineOptions::leave_out)
          } else if (kcfg_.down_cublas) {
            down_gemm_->run(rows, w2(), u, h, workspace, stream);
          } else if (!kcfg_.down_cutlass.empty()) {
            launch_cutlass_gemm_residual({as_nv(u), as_nv(w2()), h, int(rows), int(D), int(F), cfg_.ffn_residual},
                                         kcfg_.down_cutlass, stream, kcfg_.pdl);
          } else {
            launch_gemm_residual({as_nv(u), as_nv(w2()), h, int(rows), int(D), int(F), cfg_.ffn_residual},
                                 kcfg_.down, stream, kcfg_.pdl);
          }
          // The operand of the next GEMM: this event's next FFN step, or (cuBLAS router) the next
          // event's router; the event router and the collapse read h directly.
          const bool last_ffn = i + 1 == cfg_.k_ffn, last_event = e + 1 == cfg_.n_events;
          const float* gain =
              !last_ffn ? norm_w_.get() : (cublas_router && !last_event ? router_norm_.get() : nullptr);
          if (gain && !left_out_.rmsnorm) {
            mark(Phase::elementwise);
            launch_rmsnorm_bf16(h, gain, as_nv(nrm), rows, D, eps, stream, kcfg_.pdl);
          }
        }
      }
    }
  }

  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  FusedKernelConfig kcfg_;
  LeftOut left_out_;  // EngineOptions::leave_out (timing diagnostics; nothing left out otherwise)
  OwnedLtHandle lt_;
  std::unique_ptr<BatchInvariantGemm> router_gemm_, down_gemm_;
  DeviceBuffer<uint8_t> gemm_workspace_;
  DeviceBuffer<float> z_;
  DeviceBuffer<float> router_fold_;  // [5, D]: the folded router's vectors (fold_router)
  DeviceBuffer<bf16> ffn_w_, nrm_, u_;  // ffn_w_: W13 (interleaved), then W2
  int64_t chunk_ = 0;  // the most rows of an FFN chunk in any group (row_chunk, else the group's rows)
  std::vector<std::pair<int64_t, int64_t>> groups_;  // first row, rows (row_group_ranges)
  std::vector<std::unique_ptr<OwnedStream>> group_streams_;  // groups 1.. (group 0 runs on stream_)
  std::vector<std::unique_ptr<OwnedEvent>> group_done_;
  OwnedEvent fork_;
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
  select_fused_config(w.cfg, 1, opt.tune_file, opt.kernel_config);  // bad cache or override: fail now
  parse_leave_out(opt.leave_out);
  return std::make_unique<FusedEngine>(w, opt);
}

}  // namespace swapffn::cuda
