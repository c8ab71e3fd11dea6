// Backend `unfused`: SPEC section 4 op by op on the GPU, M = B*C rows at a time. GEMMs go through
// cuBLASLt (bf16 operands, fp32 accumulation, algorithm pinned per shape for batch invariance);
// the rest are the row kernels of src/cuda/kernels. The residual stream h stays fp32 on the device.
// With EngineOptions::graph a token step is captured once per batch size and replayed; x, delta and
// the trace are reached through a device-resident StepIO that the step itself advances, so one
// graph serves every token and every input buffer.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/backends.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/device_decoder.hpp"
#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/core_film.hpp"
#include "cuda/kernels/rmsnorm.hpp"
#include "cuda/kernels/router_select_swap.hpp"
#include "cuda/kernels/step_io.hpp"
#include "cuda/kernels/swiglu.hpp"
#include "cuda/unfused/batch_invariant_gemm.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16_to_float);
  return out;
}

__nv_bfloat16* as_nv(bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

// Owners of the stream and the cuBLASLt handle, so that a constructor that throws releases them.
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
};
struct OwnedLtHandle {
  cublasLtHandle_t h = nullptr;
  OwnedLtHandle() { CUBLAS_CHECK(cublasLtCreate(&h)); }
  ~OwnedLtHandle() { cublasLtDestroy(h); }
};

class UnfusedEngine final : public Engine, public DeviceDecoder {
 public:
  UnfusedEngine(const Weights& w, const EngineOptions& opt);
  ~UnfusedEngine() override;

  std::string name() const override { return "unfused"; }
  const Config& config() const override { return cfg_; }
  void step(const float* x, float* delta, State& state, const StepOptions& opt) override;
  void decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) override;

  cudaStream_t stream() const override { return stream_; }
  void upload_state(const State& s) override;
  void download_state(State& s) override;
  void decode_device(const float* x, float* delta, int64_t tokens) override;
  void step_device_timed(const float* x, float* delta, PhaseTimer& timer) override;

 private:
  void host_decode(const float* x, float* delta, int64_t tokens, State& state, Trace* traces);
  void ensure_batch(int64_t batch);
  void set_io(const float* x, float* delta, uint8_t* gate, uint8_t* slot);
  void run_tokens(int64_t tokens);
  void enqueue_step(PhaseTimer* timer);
  void capture_graph();
  void drop_graph();

  Config cfg_;
  EngineOptions opt_;
  OwnedStream owned_stream_;
  OwnedLtHandle owned_lt_;
  cudaStream_t stream_ = owned_stream_.s;
  cublasLtHandle_t lt_ = owned_lt_.h;

  // Parameters: GEMM operands in bf16, the small vectors and per-core tables widened to fp32.
  DeviceBuffer<bf16> router_w_, w13_, w2_, basis_, decoder_;
  DeviceBuffer<float> router_norm_, norm_w_, swap_w_, swap_b_, bank_w_, bank_b_, scale_, shift_, alpha_;
  DeviceBuffer<uint8_t> gemm_workspace_;
  std::unique_ptr<BatchInvariantGemm> router_gemm_, up_gemm_, down_gemm_;

  // Per-batch buffers (M = B*C rows) and the device state.
  int64_t batch_ = 0;
  DeviceBuffer<float> h_, z_, partial_, pooled_, zc_;
  DeviceBuffer<bf16> nrm_, gu_, u_, ram_;
  DeviceBuffer<uint8_t> map_;
  DeviceBuffer<StepIO> io_;

  // Host-path staging: x, delta and trace of the tokens of one step()/decode() call.
  DeviceBuffer<float> x_dev_, delta_dev_;
  DeviceBuffer<uint8_t> gate_dev_, slot_dev_;

  cudaGraphExec_t graph_ = nullptr;
};

UnfusedEngine::UnfusedEngine(const Weights& w, const EngineOptions& opt) : cfg_(w.cfg), opt_(opt) {
  cfg_.validate();
  w.validate();
  const int64_t D = cfg_.d_model, F = cfg_.d_ff, C = cfg_.core_count, R = cfg_.d_router;

  router_w_.upload(w.router_w);
  std::vector<bf16> w13(w.w1);
  w13.insert(w13.end(), w.w3.begin(), w.w3.end());  // one GEMM for gate and up: rows [w1; w3]
  w13_.upload(w13);
  w2_.upload(w.w2);
  basis_.upload(w.collapse_basis);
  decoder_.upload(w.collapse_decoder);
  router_norm_.upload(widen(w.router_norm));
  norm_w_.upload(widen(w.norm_w));
  swap_w_.upload(widen(w.router_swap_w));
  swap_b_.upload(widen(w.router_swap_b));
  bank_w_.upload(widen(w.bank_w));
  bank_b_.upload(widen(w.bank_b));
  const CoreTables tables = CoreTables::compute(w);
  scale_.upload(tables.scale);
  shift_.upload(tables.shift);
  alpha_.upload(tables.alpha);
  gemm_workspace_.resize(kGemmWorkspaceBytes);
  io_.resize(1);

  // Algorithms pinned at the one-sequence row count (B = 1), the latency case.
  router_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, R, D, CUDA_R_32F, false, C, kGemmWorkspaceBytes);
  up_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, 2 * F, D, CUDA_R_16BF, false, C, kGemmWorkspaceBytes);
  down_gemm_ = std::make_unique<BatchInvariantGemm>(lt_, D, F, CUDA_R_32F, cfg_.ffn_residual, C, kGemmWorkspaceBytes);
  if (const char* v = std::getenv("SWAPFFN_LOG_GEMMS"); v && *v && std::strcmp(v, "0") != 0)
    std::fprintf(stderr, "unfused: router GEMM %s\nunfused: w1|w3 GEMM %s\nunfused: w2 GEMM %s\n",
                 router_gemm_->describe().c_str(), up_gemm_->describe().c_str(), down_gemm_->describe().c_str());
}

UnfusedEngine::~UnfusedEngine() { drop_graph(); }

void UnfusedEngine::drop_graph() {
  if (graph_) cudaGraphExecDestroy(graph_);
  graph_ = nullptr;
}

void UnfusedEngine::ensure_batch(int64_t batch) {
  if (batch == batch_) return;
  const int64_t D = cfg_.d_model, F = cfg_.d_ff, C = cfg_.core_count, M = batch * C;
  SWAPFFN_REQUIRE(M < (int64_t{1} << 31), "unfused: batch " + std::to_string(batch) + " x " +
                                               std::to_string(C) + " cores exceeds one launch grid");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  drop_graph();
  batch_ = 0;
  router_gemm_->set_rows(M);
  up_gemm_->set_rows(M);
  down_gemm_->set_rows(M);
  const auto m = static_cast<size_t>(M);
  h_.resize(m * D);
  z_.resize(m * cfg_.d_router);
  nrm_.resize(m * D);
  gu_.resize(m * 2 * F);
  u_.resize(m * F);
  ram_.resize(m * 4 * D);
  map_.resize(m);
  partial_.resize(static_cast<size_t>(batch * collapse_chunks(C) * cfg_.collapse_k * D));
  pooled_.resize(static_cast<size_t>(batch * cfg_.collapse_k * D));
  zc_.resize(static_cast<size_t>(batch * cfg_.collapse_r));
  batch_ = batch;
}

void UnfusedEngine::set_io(const float* x, float* delta, uint8_t* gate, uint8_t* slot) {
  launch_set_step_io(io_.get(), StepIO{x, delta, gate, slot}, stream_);
}

void UnfusedEngine::enqueue_step(PhaseTimer* timer) {
  const auto mark = [timer](Phase p) {
    if (timer) timer->mark(p);
  };
  const int64_t B = batch_, C = cfg_.core_count, M = B * C, D = cfg_.d_model, E = cfg_.n_events;
  const float eps = static_cast<float>(cfg_.norm_eps);
  void* ws = gemm_workspace_.get();

  mark(Phase::elementwise);
  const auto norm_out = [this](const float* gain) { return gain ? as_nv(nrm_.get()) : nullptr; };
  const float* film_gain = E > 0 ? router_norm_.get() : nullptr;
  launch_core_film({io_.get(), scale_.get(), shift_.get(), h_.get(), B, C, D, film_gain, norm_out(film_gain), eps},
                   stream_);
  for (int64_t e = 0; e < E; ++e) {
    const bool last_event = e + 1 == E;
    // The norm each kernel leaves behind is the operand of the next GEMM: FFN (norm.weight),
    // the next event's router (router_norm), or none before the collapse.
    const float* after_ffn_gain = last_event ? nullptr : router_norm_.get();
    mark(Phase::router_swap);
    router_gemm_->run(router_w_.get(), nrm_.get(), z_.get(), ws, stream_);
    const float* after_swap_gain = cfg_.k_ffn > 0 ? norm_w_.get() : after_ffn_gain;
    launch_router_select_swap({z_.get(), swap_w_.get(), swap_b_.get(), bank_w_.get(), bank_b_.get(), h_.get(),
                               as_nv(ram_.get()), map_.get(), io_.get(), static_cast<int>(e), M, D,
                               cfg_.d_router, after_swap_gain, norm_out(after_swap_gain), eps},
                              stream_);
    for (int64_t i = 0; i < cfg_.k_ffn; ++i) {
      mark(Phase::ffn_gemm);
      up_gemm_->run(w13_.get(), nrm_.get(), gu_.get(), ws, stream_);
      mark(Phase::elementwise);
      launch_swiglu(as_nv(gu_.get()), as_nv(u_.get()), M, cfg_.d_ff, stream_);
      mark(Phase::ffn_gemm);
      down_gemm_->run(w2_.get(), u_.get(), h_.get(), ws, stream_);
      const float* gain = i + 1 < cfg_.k_ffn ? norm_w_.get() : after_ffn_gain;
      if (gain) {
        mark(Phase::elementwise);
        launch_rmsnorm_bf16(h_.get(), gain, as_nv(nrm_.get()), M, D, eps, stream_);
      }
    }
  }
  mark(Phase::collapse);
  launch_collapse({h_.get(), alpha_.get(), as_nv(basis_.get()), as_nv(decoder_.get()), partial_.get(),
                   pooled_.get(), zc_.get(), io_.get(), B, C, D, cfg_.collapse_k, cfg_.collapse_r,
                   cfg_.collapse_silu},
                  stream_);
  launch_advance_step_io(io_.get(), B * D, E * M, stream_);
  if (timer) timer->stop();
}

void UnfusedEngine::run_tokens(int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (graph_) {
      CUDA_CHECK(cudaGraphLaunch(graph_, stream_));
      continue;
    }
    // The first step after (re)allocation runs eagerly; with graphs on, the capture follows it: by
    // then cuBLASLt and every kernel module are loaded, so the capture records launches only.
    enqueue_step(nullptr);
    if (opt_.graph) capture_graph();
  }
}

void UnfusedEngine::capture_graph() {
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_step(nullptr);
  } catch (...) {
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
  const cudaError_t inst = cudaGraphInstantiate(&graph_, g, 0);
  cudaGraphDestroy(g);
  if (inst != cudaSuccess) graph_ = nullptr;
  CUDA_CHECK(inst);
}

void UnfusedEngine::upload_state(const State& s) {
  s.check_matches(cfg_, s.batch);
  s.validate();
  ensure_batch(s.batch);
  if (s.batch == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(ram_.get(), s.ram.data(), s.ram.size() * sizeof(bf16), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(map_.get(), s.stream_map.data(), s.stream_map.size(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void UnfusedEngine::download_state(State& s) {
  SWAPFFN_REQUIRE(s.batch == batch_, "download_state: the state holds " + std::to_string(s.batch) +
                                         " sequences, the device " + std::to_string(batch_));
  std::vector<bf16> ram(s.ram.size());
  std::vector<uint8_t> map(s.stream_map.size());
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaMemcpy(ram.data(), ram_.get(), ram.size() * sizeof(bf16), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(map.data(), map_.get(), map.size(), cudaMemcpyDeviceToHost));
  s.ram.swap(ram);
  s.stream_map.swap(map);
}

void UnfusedEngine::decode_device(const float* x, float* delta, int64_t tokens) {
  SWAPFFN_REQUIRE(batch_ > 0, "decode_device before upload_state");
  SWAPFFN_REQUIRE(tokens >= 0, "negative token count");
  if (tokens == 0) return;
  set_io(x, delta, nullptr, nullptr);
  run_tokens(tokens);
}

void UnfusedEngine::step_device_timed(const float* x, float* delta, PhaseTimer& timer) {
  SWAPFFN_REQUIRE(batch_ > 0, "step_device_timed before upload_state");
  set_io(x, delta, nullptr, nullptr);
  enqueue_step(&timer);
}

void UnfusedEngine::host_decode(const float* x, float* delta, int64_t tokens, State& state, Trace* traces) {
  SWAPFFN_REQUIRE(tokens >= 0, "negative token count");
  state.check_matches(cfg_, state.batch);
  state.validate();
  const int64_t B = state.batch, D = cfg_.d_model, E = cfg_.n_events, M = B * cfg_.core_count;
  check_finite(x, tokens * B * D, "x");
  if (tokens == 0 || B == 0) {
    for (int64_t t = 0; traces && t < tokens; ++t) traces[t].resize(E, B, cfg_.core_count);
    return;
  }
  upload_state(state);
  const auto n_io = static_cast<size_t>(tokens * B * D);
  x_dev_.reserve(n_io);
  delta_dev_.reserve(n_io);
  CUDA_CHECK(cudaMemcpyAsync(x_dev_.get(), x, n_io * sizeof(float), cudaMemcpyHostToDevice, stream_));
  const auto n_trace = static_cast<size_t>(tokens * E * M);
  if (traces) {
    gate_dev_.reserve(n_trace);
    slot_dev_.reserve(n_trace);
  }
  set_io(x_dev_.get(), delta_dev_.get(), traces ? gate_dev_.get() : nullptr, traces ? slot_dev_.get() : nullptr);
  run_tokens(tokens);
  CUDA_CHECK(cudaStreamSynchronize(stream_));

  std::vector<float> out(n_io);
  CUDA_CHECK(cudaMemcpy(out.data(), delta_dev_.get(), n_io * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<Trace> got(traces ? static_cast<size_t>(tokens) : 0);
  for (size_t t = 0; t < got.size(); ++t) {
    got[t].resize(E, B, cfg_.core_count);
    const size_t off = t * static_cast<size_t>(E * M), n = static_cast<size_t>(E * M);
    CUDA_CHECK(cudaMemcpy(got[t].gate.data(), gate_dev_.get() + off, n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(got[t].slot.data(), slot_dev_.get() + off, n, cudaMemcpyDeviceToHost));
  }
  download_state(state);
  std::memcpy(delta, out.data(), n_io * sizeof(float));
  for (size_t t = 0; t < got.size(); ++t) traces[t] = std::move(got[t]);
}

void UnfusedEngine::step(const float* x, float* delta, State& state, const StepOptions& opt) {
  SWAPFFN_REQUIRE(opt.follow == nullptr,
                  "backend 'unfused' does not follow traces: check it by letting the reference follow the "
                  "trace it records");
  host_decode(x, delta, 1, state, opt.record);
}

void UnfusedEngine::decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) {
  std::vector<Trace> traces(record ? static_cast<size_t>(std::max<int64_t>(tokens, 0)) : 0);
  host_decode(x, delta, tokens, state, record ? traces.data() : nullptr);
  if (record) *record = std::move(traces);
}

}  // namespace

std::unique_ptr<Engine> make_unfused_engine(const Weights& w, const EngineOptions& opt) {
  return std::make_unique<UnfusedEngine>(w, opt);
}

}  // namespace swapffn::cuda
