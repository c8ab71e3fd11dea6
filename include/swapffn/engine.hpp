// The engine interface every backend implements (reference, unfused, fused, ...): one decode step
// x [B, D] -> delta [B, D] that updates a State, with optional recording of the decision trace and
// optional following of a given trace (SPEC section 5).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "swapffn/device_steps.hpp"
#include "swapffn/fused_options.hpp"
#include "swapffn/state.hpp"
#include "swapffn/state_pool.hpp"
#include "swapffn/weights.hpp"

namespace swapffn {

// The precision of a backend's GEMM operands: it names the backend's check tolerance
// (Tolerance::preset) and the cuBLAS anchor its speed is set against.
enum class Precision { fp32, bf16, fp8 };
// "fp32", "bf16", "fp8".
const char* precision_name(Precision p);

// Hard decisions of one decode step, indexed [event, sequence, core] (E * B * C entries).
struct Trace {
  int64_t events = 0, batch = 0, cores = 0;
  std::vector<uint8_t> gate;  // 1 when the swap gate was open (s > 0)
  std::vector<uint8_t> slot;  // logical slot j = argmax of the bank logits (0..3), recorded always
  void resize(int64_t e, int64_t b, int64_t c);
  int64_t index(int64_t e, int64_t b, int64_t c) const { return (e * batch + b) * cores + c; }
  bool operator==(const Trace&) const = default;
};

// What a backend saw at each decision while following a trace: its own decision and margin.
struct FollowReport {
  Trace own;                      // the decisions the backend would have made itself
  std::vector<float> gate_margin;  // |s|, [E, B, C]
  std::vector<float> slot_margin;  // top-1 minus top-2 bank logit, [E, B, C]
};

struct StepOptions {
  Trace* record = nullptr;          // when set, filled with this step's decisions
  const Trace* follow = nullptr;    // when set, these decisions are applied instead of computed
  FollowReport* report = nullptr;   // with follow: filled with own decisions and margins
};

// Threads: an Engine and the pools it made serve one call at a time (a GPU engine keeps per-batch
// buffers, graphs and a stream); callers that share one across threads serialise their calls, as
// the Python layer does with a lock per engine (docs/PYTHON.md). Distinct engines are independent.
class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string name() const = 0;
  virtual const Config& config() const = 0;
  // The precision of its GEMM operands (fp32: the reference).
  virtual Precision precision() const { return Precision::bf16; }

  // One decode step for state.batch sequences. x and delta are host arrays [B, D] fp32.
  // Validation (shapes, x non-finite or out of range, trace sizes) happens before anything changes: on an error the
  // state is left bitwise unchanged.
  virtual void step(const float* x, float* delta, State& state, const StepOptions& opt = {}) = 0;

  // T steps: x [T, B, D], delta [T, B, D]. Backends on a device keep the state there between
  // tokens; traces (when given) hold T entries. The default calls step() T times.
  virtual void decode(const float* x, float* delta, int64_t tokens, State& state,
                      std::vector<Trace>* record = nullptr);

  // A pool of `slots` sequences' state where this engine keeps it (host or device), every slot at
  // the initial state.
  virtual std::unique_ptr<StatePool> make_pool(int64_t slots);
  // One step for B = slot_ids.size() rows of x [B, D] (host fp32): row b reads and writes slot
  // slot_ids[b] of `pool` (made by this engine's make_pool), or is padding (kPaddingSlot: its delta
  // row is zero and no slot changes). Slot ids are distinct. With opt.record, the trace holds the
  // non-padding rows in order. Validation happens before anything changes: on an error the pool is
  // left as it was. A sequence's results do not depend on its slot, the other rows or B.
  virtual void step_slots(const float* x, const std::vector<int32_t>& slot_ids, float* delta, StatePool& pool,
                          const StepOptions& opt = {});
  // Its device face (device arrays, a caller's stream), or nullptr for an engine on the host.
  virtual DeviceSteps* device_steps() { return nullptr; }
};

struct EngineOptions {
  int threads = 0;     // CPU threads for the reference (0 = hardware concurrency)
  bool graph = true;   // GPU backends: capture a token step in a CUDA graph
  FusedOptions fused;  // fused backend: pinned or tuned kernel choices (refused by the others)
};

// Throws naming the first element (index) of x[n] that is non-finite or beyond kMaxValueMagnitude.
void check_input_values(const float* x, int64_t n, const char* what);

}  // namespace swapffn
