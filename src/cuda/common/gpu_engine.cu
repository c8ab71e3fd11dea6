#include "cuda/common/gpu_engine.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>

#include "cuda/kernels/collapse.hpp"
#include "cuda/kernels/slot_padding_rows.hpp"
#include "cuda/runtime/device_guard.hpp"
#include "swapffn/device.hpp"
#include "swapffn/error.hpp"
#include "swapffn/limits.hpp"

namespace swapffn::cuda {
namespace {

// The product of dimensions, refused by name when it overflows int64.
int64_t checked_product(std::initializer_list<int64_t> dims, const std::string& what) {
  int64_t p = 1;
  std::string shown;
  for (int64_t d : dims) {
    shown += (shown.empty() ? "" : " x ") + std::to_string(d);
    if (__builtin_mul_overflow(p, d, &p)) SWAPFFN_FAIL(what + ": the product " + shown + " overflows 64 bits");
  }
  return p;
}

SlotSource slot_source(const DeviceStatePool& pool, const int32_t* slot_ids) {
  return {as_nv(pool.ram()), pool.stream_map(), slot_ids, pool.slots()};
}

// The message of the fault in flight, for the slots it tears.
std::string fault_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an unknown fault";
  }
}

}  // namespace

void require_hopper_gpu(const std::string& backend) {
  const GpuInfo gpu = query_gpu();
  SWAPFFN_REQUIRE_AS(NoGpuError, gpu.is_hopper(),
                     "backend '" + backend + "' needs a Hopper GPU: " + gpu.why_not_hopper());
}

std::vector<float> widen_bf16(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), bf16_to_float);
  return out;
}

namespace {

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

}  // namespace

GpuEngine::GpuEngine(const Weights& w, const EngineOptions& opt) : cfg_(w.cfg), opt_(opt), device_(current_device()) {
  const CoreTables tables = CoreTables::compute(w);  // validates w first
  router_w_.upload(w.router_w);
  basis_.upload(w.collapse_basis);
  decoder_.upload(w.collapse_decoder);
  router_norm_.upload(widen_bf16(w.router_norm));
  norm_w_.upload(widen_bf16(w.norm_w));
  swap_w_.upload(widen_bf16(w.router_swap_w));
  swap_b_.upload(widen_bf16(w.router_swap_b));
  bank_w_.upload(widen_bf16(w.bank_w));
  bank_b_.upload(widen_bf16(w.bank_b));
  scale_.upload(tables.scale);
  shift_.upload(tables.shift);
  alpha_.upload(tables.alpha);
  io_.resize(1);
}

// The derived engines' buffers are freed before this runs: cudaFree and the stream's destruction
// find their device from the handle (unified addressing), whatever device is current.
GpuEngine::~GpuEngine() {
  cudaStreamSynchronize(stream_);
  drop_graphs();
}

void GpuEngine::drop_graphs() { graphs_.clear(); }

void GpuEngine::require_usable() const {
  SWAPFFN_REQUIRE(broken_.empty(), name() + ": the GPU failed in an earlier call (" + broken_ +
                                       "), and this process cannot use it again: start a new one");
}

void GpuEngine::forget_batch_after_failure(bool capturing) noexcept {
  batch_ = 0;
  if (capturing) return;
  // A fault that breaks the context (an illegal address, a trap) shows at the next synchronisation
  // and stays; a failed allocation or launch configuration does not, and only its error is cleared.
  if (const cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess && broken_.empty())
    broken_ = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  cudaGetLastError();
  drop_graphs();
}

void GpuEngine::ensure_batch(int64_t batch, bool capturing) {
  if (batch == batch_) return;
  // Every size first: a batch refused here leaves the engine as it was.
  const int64_t D = cfg_.d_model, C = cfg_.core_count, K = cfg_.collapse_k;
  const std::string of_batch = name() + ": batch " + std::to_string(batch);
  const int64_t M = checked_product({batch, C}, of_batch + " rows");
  SWAPFFN_REQUIRE(M < (int64_t{1} << 31), of_batch + " x " + std::to_string(C) + " cores exceeds one launch grid");
  const int64_t n_h = checked_product({M, D}, of_batch + " h"), n_ram = checked_product({M, 4, D}, of_batch + " ram"),
                n_partial = checked_product({batch, collapse_chunks(C), K, D}, of_batch + " collapse partials"),
                n_pooled = checked_product({batch, K, D}, of_batch + " collapse pools"),
                n_zc = checked_product({batch, cfg_.collapse_r}, of_batch + " collapse codes");
  SWAPFFN_REQUIRE(!capturing || set_up_.count(batch) > 0,
                  of_batch + " has not run on this engine outside a CUDA graph capture: run one step at this batch "
                             "size outside the capture first (its set-up, buffers and first launches, cannot be recorded)");
  if (batch > sized_batch_) {
    const double state_bytes = 4.0 * n_h + 2.0 * n_ram + M + 4.0 * n_partial + 4.0 * n_pooled + 4.0 * n_zc;
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    SWAPFFN_REQUIRE(state_bytes <= double(total), of_batch + " needs " + format_bytes(state_bytes) +
                                                      " of GPU memory for its state alone, more than the GPU's " +
                                                      format_bytes(double(total)));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the buffers about to move may be in use
  }
  batch_ = 0;
  bool moved = false;
  try {
    // A smaller batch fits the buffers as they are, except with unusual tuned row groups; inside a
    // capture such a reallocation is refused rather than recorded.
    const NoDeviceAllocation in_capture(capturing);
    moved |= h_.reserve(size_t(n_h), "h (the fp32 core rows)");
    moved |= ram_.reserve(size_t(n_ram), "ram (the RAM banks)");
    moved |= map_.reserve(size_t(M), "the stream maps");
    moved |= partial_.reserve(size_t(n_partial), "the collapse partials");
    moved |= pooled_.reserve(size_t(n_pooled), "the collapse pools");
    moved |= zc_.reserve(size_t(n_zc), "the collapse codes");
    moved |= allocate_batch(batch);
  } catch (const OutOfDeviceMemory& e) {
    // Memory that a batch which did not fit took is given back, for the next call or the caller.
    h_.release();
    ram_.release();
    map_.release();
    partial_.release();
    pooled_.release();
    zc_.release();
    release_batch();
    sized_batch_ = 0;
    set_up_.clear();
    ++generation_;
    forget_batch_after_failure();
    throw OutOfDeviceMemory(of_batch + " does not fit in the GPU's memory: " + e.what());
  } catch (...) {
    if (!capturing) ++generation_;  // some buffers may have moved (in a capture none can)
    forget_batch_after_failure(capturing);
    throw;
  }
  if (moved) {  // every graph recorded the old buffers: the engine's are dropped, a caller's counts
    ++generation_;
    drop_graphs();
  }
  sized_batch_ = std::max(sized_batch_, batch);
  if (!capturing) set_up_.insert(batch);
  batch_ = batch;
}

void GpuEngine::after_last_stream(cudaStream_t s) {
  if (last_stream_ && *last_stream_ != s) CUDA_CHECK(cudaStreamWaitEvent(s, last_done_.e, 0));
}

void GpuEngine::on_stream_done(cudaStream_t s) {
  CUDA_CHECK(cudaEventRecord(last_done_.e, s));
  last_stream_ = s;
}

void GpuEngine::mark_stream_after_failure(cudaStream_t s) noexcept {
  // Kernels enqueued before the failure may still run: later work on another stream must wait for
  // them. Where even the record fails, the stream is synchronised instead.
  if (cudaEventRecord(last_done_.e, s) == cudaSuccess)
    last_stream_ = s;
  else
    cudaStreamSynchronize(s);
}

void GpuEngine::set_io(const StepIO& io) { launch_set_step_io(io_.get(), io, stream_); }

void GpuEngine::enqueue_collapse_and_advance() {
  const int64_t B = batch_, C = cfg_.core_count, D = cfg_.d_model;
  const CollapseArgs args{h_.get(), alpha_.get(), as_nv(basis_.get()), as_nv(decoder_.get()),
                          partial_.get(), pooled_.get(), zc_.get(), io_.get(),
                          B, C, D, cfg_.collapse_k, cfg_.collapse_r, cfg_.collapse_silu};
  launch_collapse_and_advance(args, B * D, cfg_.n_events * B * C, stream_);
}

void GpuEngine::enqueue_slot_step() {
  const int64_t C = cfg_.core_count;
  const SlotRows rows{as_nv(ram_.get()), map_.get(), batch_, C * 4 * cfg_.d_model, C};
  launch_init_padding_rows(io_.get(), rows, stream_);
  enqueue_step();
}

GpuEngine::StepGraphs& GpuEngine::graphs_of_batch() {
  if (graphs_.count(batch_) == 0 && graphs_.size() >= kCachedBatchSizes) {
    const auto oldest = std::min_element(graphs_.begin(), graphs_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used < b.second.last_used;
    });
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // its last replay may still run
    graphs_.erase(oldest);
  }
  StepGraphs& g = graphs_[batch_];
  g.last_used = ++graph_uses_;
  return g;
}

void GpuEngine::run_tokens(int64_t tokens, bool slots) {
  StepGraphs& of_batch = graphs_of_batch();
  StepGraph& g = slots ? of_batch.slots : of_batch.dense;
  const auto enqueue = [this, slots] {
    if (slots)
      enqueue_slot_step();
    else
      enqueue_step();
  };
  for (int64_t t = 0; t < tokens; ++t) {
    if (!g.graph && g.warm && opt_.graph) g.graph = std::make_unique<CapturedGraph>(stream_, enqueue);
    if (g.graph) {
      g.graph->launch(stream_);
    } else {
      enqueue();
      g.warm = true;
    }
  }
}

void GpuEngine::upload_state(const State& s) {
  const DeviceGuard on_device(device_);
  require_usable();
  s.check_matches(cfg_, s.batch);
  s.validate();
  ensure_batch(s.batch);
  if (s.batch == 0) return;
  try {
    after_last_stream(stream_);
    CUDA_CHECK(cudaMemcpyAsync(ram_.get(), s.ram.data(), s.ram.size() * sizeof(bf16), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaMemcpyAsync(map_.get(), s.stream_map.data(), s.stream_map.size(), cudaMemcpyHostToDevice, stream_));
    on_stream_done(stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    forget_batch_after_failure();
    throw;
  }
}

void GpuEngine::download_state(State& s) {
  const DeviceGuard on_device(device_);
  require_usable();
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
  const DeviceGuard on_device(device_);
  require_usable();
  SWAPFFN_REQUIRE(batch_ > 0, "enqueue_decode before upload_state");
  SWAPFFN_REQUIRE(tokens >= 0, "negative token count");
  if (tokens == 0) return;
  try {
    after_last_stream(stream_);
    set_io(StepIO{x, delta, nullptr, nullptr, {}});
    run_tokens(tokens, false);
    on_stream_done(stream_);
  } catch (...) {
    forget_batch_after_failure();
    throw;
  }
}

void GpuEngine::host_decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) {
  require_usable();
  require_in_range(tokens, 0, kMaxTokens, "decode tokens");
  state.check_matches(cfg_, state.batch);
  state.validate();
  const int64_t B = state.batch, D = cfg_.d_model, E = cfg_.n_events, C = cfg_.core_count;
  const int64_t n_io = checked_product({tokens, B, D}, name() + ": x for " + std::to_string(tokens) + " tokens");
  const int64_t n_trace = checked_product({tokens, E, B, C}, name() + ": the trace of " + std::to_string(tokens) +
                                                                 " tokens");
  check_input_values(x, n_io, "x");
  if (tokens == 0 || B == 0) {
    if (record) {
      record->assign(static_cast<size_t>(tokens), Trace{});
      for (Trace& t : *record) t.resize(E, B, C);
    }
    return;
  }
  // Everything the call produces lands here first; state, delta and the record change only once
  // every device call has succeeded.
  std::vector<float> out(static_cast<size_t>(n_io));
  std::vector<Trace> got(record ? static_cast<size_t>(tokens) : 0);
  upload_state(state);
  try {
    x_dev_.reserve(size_t(n_io), "the inputs x");
    delta_dev_.reserve(size_t(n_io), "the outputs delta");
    CUDA_CHECK(cudaMemcpyAsync(x_dev_.get(), x, n_io * sizeof(float), cudaMemcpyHostToDevice, stream_));
    if (record) {
      gate_dev_.reserve(size_t(n_trace), "the trace's gates");
      slot_dev_.reserve(size_t(n_trace), "the trace's slots");
    }
    set_io(StepIO{x_dev_.get(), delta_dev_.get(), record ? gate_dev_.get() : nullptr,
                  record ? slot_dev_.get() : nullptr, {}});
    run_tokens(tokens, false);
    on_stream_done(stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaMemcpy(out.data(), delta_dev_.get(), n_io * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t t = 0; t < got.size(); ++t) {
      got[t].resize(E, B, C);
      const size_t n = static_cast<size_t>(E * B * C), off = t * n;
      CUDA_CHECK(cudaMemcpy(got[t].gate.data(), gate_dev_.get() + off, n, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaMemcpy(got[t].slot.data(), slot_dev_.get() + off, n, cudaMemcpyDeviceToHost));
    }
    download_state(state);
  } catch (...) {
    forget_batch_after_failure();
    throw;
  }
  std::memcpy(delta, out.data(), out.size() * sizeof(float));
  if (record) *record = std::move(got);
}

std::unique_ptr<StatePool> GpuEngine::make_pool(int64_t slots) {
  const DeviceGuard on_device(device_);
  return std::make_unique<DeviceStatePool>(cfg_, slots, this, device_);
}

DeviceStatePool& GpuEngine::own_pool(StatePool& pool) const {
  auto* dev = dynamic_cast<DeviceStatePool*>(&pool);
  SWAPFFN_REQUIRE(dev != nullptr && dev->owner() == this,
                  "backend '" + name() + "': the state pool was made by another engine");
  return *dev;
}

void GpuEngine::step_slots(const float* x, const std::vector<int32_t>& slot_ids, float* delta, StatePool& pool,
                           const StepOptions& opt) {
  const DeviceGuard on_device(device_);
  SWAPFFN_REQUIRE(opt.follow == nullptr, "backend '" + name() + "' does not follow traces");
  require_usable();
  DeviceStatePool& dev = own_pool(pool);
  check_slot_ids(slot_ids, dev.slots(), true);
  dev.torn().require_whole(&slot_ids);
  const int64_t D = cfg_.d_model, B = int64_t(slot_ids.size());
  check_input_values(x, B * D, "x");
  const NamedRows rows = named_rows(x, slot_ids, D);  // what the trace holds; padding gets zero delta
  const std::vector<int32_t>& named = rows.slots;
  const std::vector<float>& x_rows = rows.x;
  std::vector<float> delta_rows(x_rows.size());
  if (!named.empty()) {
    const int64_t n = int64_t(named.size()), E = cfg_.n_events, M = n * cfg_.core_count;
    ensure_batch(n);  // every allocation before the pool is touched
    bool started = false;  // kernels may have touched the named slots
    try {
      x_dev_.reserve(x_rows.size());
      delta_dev_.reserve(x_rows.size());
      slot_ids_dev_.reserve(size_t(n));
      if (opt.record) {
        gate_dev_.reserve(size_t(E * M));
        slot_dev_.reserve(size_t(E * M));
      }
      after_last_stream(stream_);
      CUDA_CHECK(cudaMemcpyAsync(x_dev_.get(), x_rows.data(), x_rows.size() * sizeof(float), cudaMemcpyHostToDevice,
                                 stream_));
      CUDA_CHECK(cudaMemcpyAsync(slot_ids_dev_.get(), named.data(), size_t(n) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                 stream_));
      started = true;
      set_io(StepIO{x_dev_.get(), delta_dev_.get(), opt.record ? gate_dev_.get() : nullptr,
                    opt.record ? slot_dev_.get() : nullptr, slot_source(dev, slot_ids_dev_.get())});
      run_tokens(1, true);
      on_stream_done(stream_);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      CUDA_CHECK(cudaMemcpy(delta_rows.data(), delta_dev_.get(), delta_rows.size() * sizeof(float), cudaMemcpyDeviceToHost));
      if (opt.record) {
        Trace t;
        t.resize(E, n, cfg_.core_count);
        CUDA_CHECK(cudaMemcpy(t.gate.data(), gate_dev_.get(), size_t(E * M), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(t.slot.data(), slot_dev_.get(), size_t(E * M), cudaMemcpyDeviceToHost));
        *opt.record = std::move(t);
      }
    } catch (...) {  // a failed step leaves no batch behind: the next call sizes afresh or refuses
      if (started) dev.torn().tear(&named, fault_of(std::current_exception()));
      forget_batch_after_failure();
      throw;
    }
  }
  spread_named_deltas(delta_rows, slot_ids, D, delta);
}

void GpuEngine::enqueue_step_slots(const float* x, const int32_t* slot_ids, int64_t batch, float* delta, StatePool& pool,
                                   cudaStream_t stream) {
  const DeviceGuard on_device(device_);
  require_usable();
  DeviceStatePool& dev = own_pool(pool);
  require_in_range(batch, 1, kMaxBatch, "rows in one slot step");
  dev.torn().require_whole(nullptr);  // the ids are on the device
  // On the caller's stream the step is enqueued kernel by kernel, so that the caller's own CUDA
  // graph capture records it (the engine's graphs belong to its own stream).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  ensure_batch(batch, capturing);
  const cudaStream_t own = stream_;
  stream_ = stream;
  try {
    if (!capturing) after_last_stream(stream);
    set_io(StepIO{x, delta, nullptr, nullptr, slot_source(dev, slot_ids)});
    enqueue_slot_step();
    if (!capturing) on_stream_done(stream);
  } catch (...) {
    stream_ = own;
    // Inside a capture (or after one failed) nothing ran: the slots are as they were.
    const bool captured = cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone;
    if (!captured) {
      dev.torn().tear(nullptr, fault_of(std::current_exception()));
      mark_stream_after_failure(stream);
    }
    throw;
  }
  stream_ = own;
}

void GpuEngine::enqueue_decode_slots(const float* x, float* delta, int64_t tokens, StatePool& pool,
                                     const int32_t* slot_ids, int64_t batch, std::optional<cudaStream_t> caller) {
  const DeviceGuard on_device(device_);
  require_usable();
  DeviceStatePool& dev = own_pool(pool);
  require_in_range(batch, 1, kMaxBatch, "enqueue_decode_slots: batch");
  require_in_range(tokens, 0, kMaxTokens, "enqueue_decode_slots: tokens");
  dev.torn().require_whole(nullptr);  // the ids are on the device
  if (caller) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(*caller, &capturing));
    SWAPFFN_REQUIRE(capturing == cudaStreamCaptureStatusNone,
                    "decode replays the engine's own graphs: it cannot run inside a stream capture (capture "
                    "single steps instead)");
  }
  ensure_batch(batch);
  if (tokens == 0) return;
  bool started = false;  // kernels may have touched the slots
  try {
    if (caller) {
      CUDA_CHECK(cudaEventRecord(caller_ready_.e, *caller));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, caller_ready_.e, 0));
    }
    after_last_stream(stream_);
    started = true;
    set_io(StepIO{x, delta, nullptr, nullptr, slot_source(dev, slot_ids)});
    run_tokens(tokens, true);
    if (caller) {
      CUDA_CHECK(cudaEventRecord(steps_done_.e, stream_));
      CUDA_CHECK(cudaStreamWaitEvent(*caller, steps_done_.e, 0));
    }
    on_stream_done(caller ? *caller : stream_);
  } catch (...) {
    if (started) dev.torn().tear(nullptr, fault_of(std::current_exception()));
    mark_stream_after_failure(caller ? *caller : stream_);
    forget_batch_after_failure();
    throw;
  }
}

void GpuEngine::step(const float* x, float* delta, State& state, const StepOptions& opt) {
  const DeviceGuard on_device(device_);
  SWAPFFN_REQUIRE(opt.follow == nullptr, "backend '" + name() +
                                             "' does not follow traces: check it by letting the reference follow "
                                             "the trace it records");
  std::vector<Trace> traces;
  host_decode(x, delta, 1, state, opt.record ? &traces : nullptr);
  if (opt.record) *opt.record = std::move(traces[0]);
}

void GpuEngine::decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) {
  const DeviceGuard on_device(device_);
  host_decode(x, delta, tokens, state, record);
}

}  // namespace swapffn::cuda
