// The `swapffn run --dump F` file: everything an independent implementation needs to replay and
// judge a run (inputs, outputs, decision trace, initial and final state), as one safetensors file.
//   x [T,B,D] F32, delta [T,B,D] F32, gate [T,E,B,C] U8, slot [T,E,B,C] U8,
//   ram [B,C,4,D] BF16, stream_map [B,C] U8 (final state),
//   ram0 / stream_map0 (initial state, only when the run started from a given state),
//   __metadata__: swapffn.config (model config JSON), swapffn.backend (backend name).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "swapffn/config.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/state.hpp"

namespace swapffn {

struct Dump {
  Config cfg;
  std::string backend;
  int64_t tokens = 0, batch = 0;
  std::vector<float> x;                // [T, B, D]
  std::vector<float> delta;            // [T, B, D]
  std::vector<uint8_t> gate, slot;     // [T, E, B, C]
  State final_state;                   // ram/stream_map
  std::optional<State> initial_state;  // ram0/stream_map0

  // Concatenates per-token traces (each [E, B, C]) into gate/slot; sizes checked against cfg.
  void set_traces(const std::vector<Trace>& traces);
  // The inverse: one Trace per token.
  std::vector<Trace> traces() const;

  // Throws naming the first array whose size does not fit cfg, tokens and batch, or an invalid
  // gate (> 1) / slot (> 3) value or state.
  void validate() const;
};

void write_dump(const std::string& path, const Dump& d);
// Reads and validates a dump (shapes against the config in its metadata).
Dump read_dump(const std::string& path);

}  // namespace swapffn
