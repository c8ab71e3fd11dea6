#include "cuda/common/gpu_engine.hpp"

#include <algorithm>
#include <cstring>

#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/slot_copy.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn::cuda {

std::vector<float> widen_bf16(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16_to_float);
  return out;
}

GpuEngine::GpuEngine(const Weights& w, const EngineOptions& opt) : cfg_(w.cfg), opt_(opt) {
  cfg_.validate();
  w.validate();
  router_w_.upload(w.router_w);
  basis_.upload(w.collapse_basis);
  decoder_.upload(w.collapse_decoder);
  router_norm_.upload(widen_bf16(w.router_norm));
  norm_w_.upload(widen_bf16(w.norm_w));
  swap_w_.upload(widen_bf16(w.router_swap_w));
  swap_b_.upload(widen_bf16(w.router_swap_b));
  bank_w_.upload(widen_bf16(w.bank_w));
  bank_b_.upload(widen_bf16(w.bank_b));
  const CoreTables tables = CoreTables::compute(w);
  scale_.upload(tables.scale);
  shift_.upload(tables.shift);
  alpha_.upload(tables.alpha);
  io_.resize(1);
}

GpuEngine::~GpuEngine() {
  cudaStreamSynchronize(stream_);
  drop_graph();
}

void GpuEngine::drop_graph() { graph_.reset(); }

void GpuEngine::ensure_batch(int64_t batch) {
  if (batch == batch_) return;
  const int64_t D = cfg_.d_model, C = cfg_.core_count, M = batch * C;
  SWAPFFN_REQUIRE(M < (int64_t{1} << 31), name() + ": batch " + std::to_string(batch) + " x " + std::to_string(C) +
                                              " cores exceeds one launch grid");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  drop_graph();
  batch_ = 0;
  const auto m = static_cast<size_t>(M);
  h_.resize(m * D);
  ram_.resize(m * 4 * D);
  map_.resize(m);
  partial_.resize(static_cast<size_t>(batch * collapse_chunks(C) * cfg_.collapse_k * D));
  pooled_.resize(static_cast<size_t>(batch * cfg_.collapse_k * D));
  zc_.resize(static_cast<size_t>(batch * cfg_.collapse_r));
  allocate_batch(batch);
  batch_ = batch;
}

void GpuEngine::set_io(const float* x, float* delta, uint8_t* gate, uint8_t* slot) {
  launch_set_step_io(io_.get(), StepIO{x, delta, gate, slot}, stream_);
}

void GpuEngine::enqueue_collapse_and_advance() {
  const int64_t B = batch_, C = cfg_.core_count, D = cfg_.d_model;
  const CollapseArgs args{h_.get(), alpha_.get(), as_nv(basis_.get()), as_nv(decoder_.get()),
                          partial_.get(), pooled_.get(), zc_.get(), io_.get(),
                          B, C, D, cfg_.collapse_k, cfg_.collapse_r, cfg_.collapse_silu};
  launch_collapse_and_advance(args, B * D, cfg_.n_events * B * C, stream_);
}

void GpuEngine::run_tokens(int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (graph_) {
      graph_->launch(stream_);
      continue;
    }
    // The first step after (re)allocation runs eagerly; with graphs on, the capture follows it: by
    // then every library handle and kernel module is loaded, so the capture records launches only.
    enqueue_step();
    if (opt_.graph) capture_graph();
  }
}

void GpuEngine::capture_graph() {
  graph_ = std::make_unique<CapturedGraph>(stream_, [this] { enqueue_step(); });
}

void GpuEngine::upload_state(const State& s) {
  s.check_matches(cfg_, s.batch);
  s.validate();
  ensure_batch(s.batch);
  if (s.batch == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(ram_.get(), s.ram.data(), s.ram.size() * sizeof(bf16), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(map_.get(), s.stream_map.data(), s.stream_map.size(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void GpuEngine::download_state(State& s) {
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

void GpuEngine::enqueue_decode(const float* x, float* delta, int64_t tokens) {
  SWAPFFN_REQUIRE(batch_ > 0, "enqueue_decode before upload_state");
  SWAPFFN_REQUIRE(tokens >= 0, "negative token count");
  if (tokens == 0) return;
  set_io(x, delta, nullptr, nullptr);
  run_tokens(tokens);
}

void GpuEngine::host_decode(const float* x, float* delta, int64_t tokens, State& state, Trace* traces) {
  require_in_range(tokens, 0, kMaxTokens, "decode tokens");
  state.check_matches(cfg_, state.batch);
  state.validate();
  const int64_t B = state.batch, D = cfg_.d_model, E = cfg_.n_events;
  check_finite(x, checked_product({tokens, B, D}, "decode inputs T*B*D"), "x");
  if (tokens == 0 || B == 0) {
    for (int64_t t = 0; traces && t < tokens; ++t) traces[t].resize(E, B, cfg_.core_count);
    return;
  }
  upload_state(state);
  run_host_io(x, delta, tokens, traces);
  download_state(state);
}

void GpuEngine::run_host_io(const float* x, float* delta, int64_t tokens, Trace* traces) {
  const int64_t B = batch_, D = cfg_.d_model, E = cfg_.n_events, M = B * cfg_.core_count;
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
  std::memcpy(delta, out.data(), n_io * sizeof(float));
  for (size_t t = 0; t < got.size(); ++t) traces[t] = std::move(got[t]);
}

std::unique_ptr<StatePool> GpuEngine::make_pool(int64_t slots) {
  return std::make_unique<DeviceStatePool>(cfg_, slots, this);
}

DeviceStatePool& GpuEngine::own_pool(StatePool& pool) const {
  auto* dev = dynamic_cast<DeviceStatePool*>(&pool);
  SWAPFFN_REQUIRE(dev != nullptr && dev->owner() == this,
                  "backend '" + name() + "': the state pool was made by another engine");
  return *dev;
}

void GpuEngine::step_slots(const float* x, const std::vector<int32_t>& slot_ids, float* delta, StatePool& pool,
                           const StepOptions& opt) {
  SWAPFFN_REQUIRE(opt.follow == nullptr, "backend '" + name() + "' does not follow traces");
  DeviceStatePool& dev = own_pool(pool);
  check_slot_ids(slot_ids, dev.slots(), true);
  const int64_t D = cfg_.d_model, B = int64_t(slot_ids.size());
  check_finite(x, B * D, "x");
  // The named rows only, in order (what the trace holds); padding rows get zero delta here.
  std::vector<int32_t> named;
  std::vector<float> x_rows;
  for (int64_t b = 0; b < B; ++b)
    if (slot_ids[size_t(b)] != kPaddingSlot) {
      named.push_back(slot_ids[size_t(b)]);
      x_rows.insert(x_rows.end(), x + b * D, x + (b + 1) * D);
    }
  std::vector<float> delta_rows(x_rows.size());
  if (!named.empty()) {
    const int64_t n = int64_t(named.size()), E = cfg_.n_events, M = n * cfg_.core_count;
    ensure_batch(n);  // every allocation before the pool is touched
    x_dev_.reserve(x_rows.size());
    delta_dev_.reserve(x_rows.size());
    slot_ids_dev_.reserve(size_t(n));
    if (opt.record) {
      gate_dev_.reserve(size_t(E * M));
      slot_dev_.reserve(size_t(E * M));
    }
    CUDA_CHECK(cudaMemcpyAsync(x_dev_.get(), x_rows.data(), x_rows.size() * sizeof(float), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(slot_ids_dev_.get(), named.data(), size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
    enqueue_slot_step(x_dev_.get(), slot_ids_dev_.get(), n, delta_dev_.get(), opt.record ? gate_dev_.get() : nullptr,
                      opt.record ? slot_dev_.get() : nullptr, dev, nullptr);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(delta_rows.data(), delta_dev_.get(), delta_rows.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (opt.record) {
      Trace t;
      t.resize(E, n, cfg_.core_count);
      CUDA_CHECK(cudaMemcpy(t.gate.data(), gate_dev_.get(), size_t(E * M), cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(t.slot.data(), slot_dev_.get(), size_t(E * M), cudaMemcpyDeviceToHost));
      *opt.record = std::move(t);
    }
  }
  for (int64_t b = 0, r = 0; b < B; ++b) {
    float* out = delta + b * D;
    if (slot_ids[size_t(b)] == kPaddingSlot)
      std::fill(out, out + D, 0.f);
    else
      std::copy_n(delta_rows.data() + (r++) * D, D, out);
  }
}

void GpuEngine::enqueue_step_slots(const float* x, const int32_t* slot_ids, int64_t batch, float* delta, StatePool& pool,
                                   cudaStream_t stream) {
  DeviceStatePool& dev = own_pool(pool);
  require_in_range(batch, 1, kMaxBatch, "rows in one slot step");
  ensure_batch(batch);
  enqueue_slot_step(x, slot_ids, batch, delta, nullptr, nullptr, dev, stream);
}

void GpuEngine::enqueue_slot_step(const float* x, const int32_t* slot_ids, int64_t batch, float* delta, uint8_t* gate,
                                  uint8_t* slot, DeviceStatePool& pool, cudaStream_t caller) {
  const SlotRows rows{as_nv(pool.ram()), pool.stream_map(), pool.slots(), as_nv(ram_.get()), map_.get(), slot_ids,
                      batch, pool.row_ram(), pool.row_map()};
  const cudaStream_t own = stream_;
  const cudaStream_t s = caller ? caller : own;
  launch_set_step_io(io_.get(), StepIO{x, delta, gate, slot}, s);
  launch_gather_slots(rows, s);
  if (caller) {
    // On the caller's stream the step is enqueued kernel by kernel, so that the caller's own CUDA
    // graph capture records it (the engine's graph belongs to its own stream).
    stream_ = caller;
    try {
      enqueue_step();
    } catch (...) {
      stream_ = own;
      throw;
    }
    stream_ = own;
  } else {
    run_tokens(1);
  }
  launch_scatter_slots(rows, delta, cfg_.d_model, s);
}

void GpuEngine::enqueue_decode_slots(const float* x, float* delta, int64_t tokens, StatePool& pool,
                                     const int32_t* slot_ids, int64_t batch) {
  DeviceStatePool& dev = own_pool(pool);
  require_in_range(batch, 1, kMaxBatch, "enqueue_decode_slots: batch");
  require_in_range(tokens, 0, kMaxTokens, "enqueue_decode_slots: tokens");
  ensure_batch(batch);
  const int64_t n = batch * cfg_.d_model;
  for (int64_t t = 0; t < tokens; ++t)
    enqueue_slot_step(x + t * n, slot_ids, batch, delta + t * n, nullptr, nullptr, dev, nullptr);
}

void GpuEngine::step(const float* x, float* delta, State& state, const StepOptions& opt) {
  SWAPFFN_REQUIRE(opt.follow == nullptr, "backend '" + name() +
                                             "' does not follow traces: check it by letting the reference follow "
                                             "the trace it records");
  host_decode(x, delta, 1, state, opt.record);
}

void GpuEngine::decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) {
  std::vector<Trace> traces(record ? static_cast<size_t>(std::max<int64_t>(tokens, 0)) : 0);
  host_decode(x, delta, tokens, state, record ? traces.data() : nullptr);
  if (record) *record = std::move(traces);
}

}  // namespace swapffn::cuda
