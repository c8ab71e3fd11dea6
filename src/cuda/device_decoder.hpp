// DeviceDecoder: what a GPU backend offers beyond the host Engine interface, for benchmarks and
// long decodes: the state stays on the device, inputs and outputs are device buffers, and token
// steps are only enqueued (no host synchronisation). The unfused and fused backends implement it
// next to Engine; `swapffn bench` drives any backend through it.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "swapffn/engine.hpp"

namespace swapffn::cuda {

// Phases of a token step for `swapffn bench --breakdown`.
enum class Phase : int { router_swap = 0, ffn_gemm, elementwise, collapse };
inline constexpr int kPhaseCount = 4;
const char* phase_name(Phase p);

// Attributes stream time to phases: mark(p) records an event, and the work enqueued until the next
// mark (or stop) counts for p. For eager (non-graph) steps only; events add a little time each.
class PhaseTimer {
 public:
  explicit PhaseTimer(cudaStream_t stream) : stream_(stream) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  void mark(Phase p);
  void stop();
  // Synchronises on the last event and adds the elapsed times to ms (milliseconds per phase);
  // then forgets the recorded marks (the events are reused).
  void collect(std::array<double, kPhaseCount>& ms);

 private:
  cudaEvent_t next_event();
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::vector<int> phases_;  // phase of the interval starting at events_[i]; -1 for a stop
  size_t used_ = 0;
};

class DeviceDecoder {
 public:
  virtual ~DeviceDecoder() = default;
  virtual cudaStream_t stream() const = 0;
  // Validates s (as Engine::step does), sizes the per-batch buffers and copies s to the device.
  virtual void upload_state(const State& s) = 0;
  // Copies the device state back (synchronises the stream).
  virtual void download_state(State& s) = 0;
  // Enqueues `tokens` steps for the uploaded batch: x and delta are device arrays [tokens, B, D]
  // fp32. x must be finite (not checked here: the host paths check it).
  virtual void decode_device(const float* x, float* delta, int64_t tokens) = 0;
  // Enqueues one eager step with phase marks (for breakdowns).
  virtual void step_device_timed(const float* x, float* delta, PhaseTimer& timer) = 0;
};

// The engine's device interface, or nullptr when it runs on the host.
inline DeviceDecoder* device_decoder_of(Engine& e) { return dynamic_cast<DeviceDecoder*>(&e); }

}  // namespace swapffn::cuda
