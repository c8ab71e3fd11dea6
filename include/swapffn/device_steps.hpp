// The device face of an engine whose state pools and buffers live on a GPU: slot steps and decodes
// enqueued on a caller's stream with device arrays, no host round trip (what the Python layer's
// CUDA tensors and a serving loop use). Every entry point runs on the engine's device and leaves
// the calling thread's current device as it was, so engines on several GPUs share one thread.
#pragma once
#include <cstdint>

#include "swapffn/state_pool.hpp"

namespace swapffn {

class DeviceSteps {
 public:
  using Stream = void*;  // a cudaStream_t (opaque here: the public headers need no CUDA)

  virtual ~DeviceSteps() = default;
  // The CUDA device of its buffers, pools and stream.
  virtual int device() const = 0;
  // One slot step enqueued on `stream`: x, delta [B, D] fp32 and slot_ids [B] int32 in device
  // memory of device(); an id outside [0, S) is padding (zero delta, no slot changes). Recorded by
  // the caller's CUDA graph capture once a step of this batch size has run outside one (else
  // refused). Repeated ids are not checked (the device holds them): the caller checks where it can.
  virtual void enqueue_step_slots(const float* x, const int32_t* slot_ids, int64_t batch, float* delta,
                                  StatePool& pool, Stream stream) = 0;
  // `tokens` slot steps of the same rows (x, delta [tokens, B, D]) on the engine's own stream, ordered
  // after the work already on `stream` and before its later work (no host synchronisation); not
  // inside a capture.
  virtual void enqueue_decode_slots(const float* x, float* delta, int64_t tokens, StatePool& pool,
                                    const int32_t* slot_ids, int64_t batch, Stream stream) = 0;
  // The engine's per-row buffers grow only, to the largest batch so far, and serve every smaller
  // batch in place; this count goes up each time they move (a batch larger than any before). A
  // caller's CUDA graph that recorded enqueue_step_slots replays onto the buffers of its capture,
  // so it is valid while this count is what it was then (capture again otherwise).
  virtual uint64_t buffers_generation() const = 0;
};

}  // namespace swapffn
