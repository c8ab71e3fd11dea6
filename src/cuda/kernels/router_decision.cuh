// The per-row decision of an event (SPEC section 4), shared by the event heads: the decision/swap
// kernel after the cuBLASLt router GEMM computes it from z; the folded router computes s and l
// without z and then chooses with the same rule.
#pragma once
#include <cstdint>

#include "cuda/kernels/row_reduce.cuh"
#include "cuda/kernels/step_io.hpp"
#include "cuda/kernels/stream_map.cuh"

namespace swapffn::cuda {

struct RowDecision {
  bool gate;  // swap this row with a bank
  int slot;   // logical slot j = argmax of the bank logits (ties -> lowest)
};

// The decision from the swap logit s and the bank logits l.
__device__ __forceinline__ RowDecision choose(float s, const float (&l)[4]) {
  int j = 0;
  float best = l[0];  // the running maximum in a register (l[j] would index l dynamically)
#pragma unroll
  for (int k = 1; k < 4; ++k)
    if (l[k] > best) {  // strict: ties keep the lowest index
      best = l[k];
      j = k;
    }
  return {s > 0.f, j};
}

// Called by a whole warp: s = z . swap_w + swap_b and l = z @ bank_w + bank_b over R router outputs
// (per-lane partial sums, then the xor butterfly); every lane gets the same decision.
__device__ __forceinline__ RowDecision decide_row(const float* z, int R, const float* swap_w, float swap_b,
                                                  const float* bank_w, const float* bank_b, int lane) {
  float s = 0.f, l[4] = {0.f, 0.f, 0.f, 0.f};
  for (int r = lane; r < R; r += 32) {
    const float zr = z[r];
    s += zr * swap_w[r];
#pragma unroll
    for (int k = 0; k < 4; ++k) l[k] += zr * bank_w[r * 4 + k];
  }
  s = warp_sum(s) + swap_b;
#pragma unroll
  for (int k = 0; k < 4; ++k) l[k] = warp_sum(l[k]) + bank_b[k];
  return choose(s, l);
}

// Where this token's trace goes (StepIO::gate/slot, null when it is not recorded). The pointers
// live in device memory, advanced by the step's last kernel: a kernel loads them once after its
// PDL wait, beside its other loads, rather than in front of the row's first trace store.
struct TracePtrs {
  uint8_t* gate;
  uint8_t* slot;
};
__device__ __forceinline__ TracePtrs load_trace(const StepIO* io) { return {io->gate, io->slot}; }

// One thread per row: the lane exchange of the stream map (map: the row's map before it, read from
// map_entry) and the trace entry of event `event`, row m of `rows`.
__device__ __forceinline__ void apply_decision(RowDecision d, uint8_t map, uint8_t* map_entry, int64_t m,
                                               TracePtrs trace, int event, int64_t rows) {
  if (d.gate) *map_entry = swap_lanes_0_j(map, d.slot);
  if (trace.gate) {
    trace.gate[int64_t(event) * rows + m] = d.gate ? 1 : 0;
    trace.slot[int64_t(event) * rows + m] = static_cast<uint8_t>(d.slot);
  }
}

}  // namespace swapffn::cuda
