// GpuEngine: the plumbing every GPU backend shares, so a backend is only its token step.
// It owns the stream, the parameters every step needs (router vectors, per-core tables, collapse
// weights), the device state (ram, stream maps, fp32 h), the device-resident StepIO through which a
// captured CUDA graph finds x, delta and the trace of the current token, graph capture and replay,
// the host Engine entry points (validation before any change, state round trips) and the
// device-resident ones (state kept on the device, steps only enqueued) that the bench drives.
// A backend derives, allocates its own per-batch buffers in allocate_batch() and enqueues one token
// step in enqueue_step(), ending with enqueue_collapse_and_advance().
// Per-row buffers only grow: sized for the largest batch so far, they serve every smaller one in
// place, so a graph captured at one batch size (the engine's own, kept per size, or a caller's)
// stays valid across steps at other sizes until a larger batch moves them (buffers_generation).
// Faults: sizes are checked before anything changes; a call that fails after that (an allocation
// the GPU cannot hold, a failed launch) leaves no batch and no graph, so the next call sizes and
// uploads afresh or refuses; a fault that broke the GPU context makes every later call refuse. The
// host State and outputs are written only once a call has succeeded.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda/runtime/captured_graph.hpp"
#include "cuda/common/device_state_pool.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/device_buffer.hpp"
#include "cuda/runtime/owned_handles.hpp"
#include "cuda/kernels/step_io.hpp"
#include "swapffn/engine.hpp"

namespace swapffn::cuda {

// Throws, naming the backend, with one plain sentence when this process has no Hopper GPU to run on.
void require_hopper_gpu(const std::string& backend);

std::vector<float> widen_bf16(const std::vector<bf16>& v);
inline __nv_bfloat16* as_nv(bf16* p) { return reinterpret_cast<__nv_bfloat16*>(p); }
inline const __nv_bfloat16* as_nv(const bf16* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }

// Made on the calling thread's current device, which it keeps: every public entry point runs there
// and restores the caller's current device after (DeviceGuard).
class GpuEngine : public Engine, public DeviceSteps {
 public:
  GpuEngine(const Weights& w, const EngineOptions& opt);
  ~GpuEngine() override;

  DeviceSteps* device_steps() override { return this; }
  int device() const override { return device_; }
  uint64_t buffers_generation() const override { return generation_; }
  const Config& config() const override { return cfg_; }
  void step(const float* x, float* delta, State& state, const StepOptions& opt) override;
  void decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record) override;
  std::unique_ptr<StatePool> make_pool(int64_t slots) override;
  void step_slots(const float* x, const std::vector<int32_t>& slot_ids, float* delta, StatePool& pool,
                  const StepOptions& opt) override;

  // Device-resident decoding: the state stays on the device between calls; x and delta are device
  // arrays [tokens, B, D] fp32 (x finite: the host paths check it, this one does not).
  cudaStream_t stream() const { return stream_; }
  // Validates s (as step() does), sizes the per-batch buffers and copies s to the device.
  void upload_state(const State& s);
  // Copies the device state back (synchronises the stream).
  void download_state(State& s);
  // Enqueues `tokens` steps for the uploaded batch (no host synchronisation).
  void enqueue_decode(const float* x, float* delta, int64_t tokens);
  // One slot step enqueued on `stream` (the caller's): x, delta [B, D] fp32 and slot_ids [B] int32
  // on the device; a slot id outside [0, S) is padding (zero delta, no slot changes). Kernel by
  // kernel, so the caller's CUDA graph capture records it; the first call at a batch size allocates
  // and must come before any capture. Slot ids are not checked for repeats here (the device holds
  // them): the caller checks them where it can (the Python layer does). Outside a capture, a step
  // on a stream other than the last one this engine used waits for that stream's work (the engine's
  // buffers serve every stream); inside one, the caller's graph and the stream it is launched on
  // order it.
  void enqueue_step_slots(const float* x, const int32_t* slot_ids, int64_t batch, float* delta, StatePool& pool,
                          cudaStream_t stream);
  void enqueue_step_slots(const float* x, const int32_t* slot_ids, int64_t batch, float* delta, StatePool& pool,
                          Stream stream) override {
    enqueue_step_slots(x, slot_ids, batch, delta, pool, static_cast<cudaStream_t>(stream));
  }
  // `tokens` slot steps of the same `batch` slots on the engine's stream (x, delta [tokens, B, D]),
  // each one replay of the slot step's graph (padding rows' init, step), as a serving loop runs:
  // what `bench` times. With a `caller` stream (not capturing; 0 is the legacy default stream), the
  // steps start after the work already enqueued on it and its later work waits for them, with no
  // host synchronisation.
  void enqueue_decode_slots(const float* x, float* delta, int64_t tokens, StatePool& pool, const int32_t* slot_ids,
                            int64_t batch, std::optional<cudaStream_t> caller = std::nullopt);
  void enqueue_decode_slots(const float* x, float* delta, int64_t tokens, StatePool& pool, const int32_t* slot_ids,
                            int64_t batch, Stream stream) override {
    enqueue_decode_slots(x, delta, tokens, pool, slot_ids, batch, std::optional(static_cast<cudaStream_t>(stream)));
  }

 protected:
  // Sizes the backend's own buffers for M = batch * C rows (the common ones are already sized),
  // growing only (DeviceBuffer::reserve); returns whether any buffer moved. An allocation it cannot
  // make throws (OutOfDeviceMemory), and the next call comes with a new batch.
  virtual bool allocate_batch(int64_t batch) = 0;
  // Frees those buffers, after an allocation for a batch that did not fit.
  virtual void release_batch() = 0;
  // Enqueues one token step on stream_ (no host synchronisation).
  virtual void enqueue_step() = 0;
  // The collapse into io->delta and the advance of the StepIO to the next token: every step's end.
  void enqueue_collapse_and_advance();

  Config cfg_;
  EngineOptions opt_;
  int device_;  // the current device at construction
  OwnedStream owned_stream_;
  cudaStream_t stream_ = owned_stream_.s;

  DeviceBuffer<bf16> router_w_, basis_, decoder_;
  DeviceBuffer<float> router_norm_, norm_w_, swap_w_, swap_b_, bank_w_, bank_b_, scale_, shift_, alpha_;

  int64_t batch_ = 0;
  int64_t sized_batch_ = 0;  // the largest batch the per-row buffers have room for
  std::set<int64_t> set_up_;  // batch sizes set up outside a capture (a capture may switch to them)
  DeviceBuffer<float> h_, partial_, pooled_, zc_;
  DeviceBuffer<bf16> ram_;
  DeviceBuffer<uint8_t> map_;
  DeviceBuffer<StepIO> io_;

 private:
  void host_decode(const float* x, float* delta, int64_t tokens, State& state, std::vector<Trace>* record);
  DeviceStatePool& own_pool(StatePool& pool) const;
  // Makes `batch` the current batch size. A batch no larger than the largest so far reuses the
  // buffers (no synchronisation); a larger one grows them. Inside a caller's stream capture
  // (`capturing`) only a batch size set up outside one before is taken (its buffers, cuBLASLt's
  // algorithm choice and first launches cannot be recorded): others are refused, nothing changed.
  void ensure_batch(int64_t batch, bool capturing = false);
  // After a call failed past its checks: no batch, no graph; a broken context is remembered. Inside
  // a capture (where nothing may synchronise or be destroyed, and no buffer moved) only no batch.
  void forget_batch_after_failure(bool capturing = false) noexcept;
  void require_usable() const;
  void set_io(const StepIO& io);
  // A slot step after set_io (on stream_): the padding rows' initial state in the batch buffers,
  // then the step, whose kernels address each other row's slot in place (row_state); the pool and
  // slot ids come from the StepIO.
  void enqueue_slot_step();
  // `tokens` steps on stream_, dense or slot steps: replays of that step's graph. The first step
  // after (re)allocation runs eagerly; with graphs on, the next one is captured before it runs (by
  // then every library handle and kernel module is loaded, so the capture records launches only,
  // and a capture that fails has changed no state).
  void run_tokens(int64_t tokens, bool slots);
  void drop_graphs();
  // Work about to be enqueued on s waits for the last work enqueued on another stream; after it is
  // enqueued, on_stream_done(s) makes s the stream later work orders itself after.
  void after_last_stream(cudaStream_t s);
  void on_stream_done(cudaStream_t s);
  void mark_stream_after_failure(cudaStream_t s) noexcept;  // on_stream_done on an error path

  struct StepGraph {
    std::unique_ptr<CapturedGraph> graph;
    bool warm = false;  // the step has run eagerly at this batch size
  };

  DeviceBuffer<float> x_dev_, delta_dev_;
  DeviceBuffer<uint8_t> gate_dev_, slot_dev_;
  DeviceBuffer<int32_t> slot_ids_dev_;
  struct StepGraphs {
    StepGraph dense, slots;
    uint64_t last_used = 0;  // run_tokens' call count at its last use
  };
  // Per batch size, while the buffers stay where they are; the least recently used goes beyond
  // kCachedBatchSizes (a loop over ever-new batch sizes would otherwise keep every one).
  static constexpr size_t kCachedBatchSizes = 16;
  std::map<int64_t, StepGraphs> graphs_;
  uint64_t graph_uses_ = 0;
  // The batch's graphs, made (after evicting the least recently used beyond kCachedBatchSizes) if new.
  StepGraphs& graphs_of_batch();
  OwnedEvent caller_ready_, steps_done_;
  OwnedEvent last_done_;                 // recorded after the last work enqueued (on last_stream_)
  std::optional<cudaStream_t> last_stream_;  // none: nothing enqueued is left unordered
  std::string broken_;  // the fault that broke the GPU context, if one did
  uint64_t generation_ = 0;  // buffers_generation(): how many times the per-row buffers moved
};

// The engine's device-resident entry points, or nullptr when it runs on the host.
inline GpuEngine* gpu_engine_of(Engine& e) { return dynamic_cast<GpuEngine*>(&e); }

}  // namespace swapffn::cuda
