// Device-side timing for `swapffn bench`: the dense bf16 GEMM rate of this GPU (the floor's
// denominator) and the per-token-step time of any GPU backend (GpuEngine's device entry points).
// Host-only types in this header, so the CLI compiles the same way with and without CUDA.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "bench/cublas_ffn_gemms.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cuda {

// Called around the timed part of a measurement: after the set-up and warm-up, through the last
// synchronisation. What `bench` samples the GPU's clock over (set-up would dilute it).
struct TimedWindow {
  std::function<void()> begin, end;
};

// Median TFLOP/s of an n x n x n cuBLASLt GEMM, bf16 operands (uniform random, never zeros),
// fp32 accumulation, bf16 output: at least `repeats` timed GEMMs, and more until `min_ms` of GEMM
// time has passed (a floor taken over as long a load as the point it is set against: the clock
// follows the GPU's power and temperature).
double measure_bf16_gemm_tflops(int n, int warmup, int repeats, double min_ms = 0, const TimedWindow& window = {});

struct DecodeTiming {
  double median_ms_per_step = 0, min_ms_per_step = 0, max_ms_per_step = 0;
};

// Times engine (a GPU backend) decoding from `initial`: `rotations` device
// input buffers [tokens, B, D] of random x are used in turn, the state carries over between runs;
// `warmup` untimed runs, then `repeats` runs of `tokens` steps each timed with CUDA events.
DecodeTiming time_device_decode(Engine& engine, const State& initial, int tokens, int warmup, int repeats,
                                int rotations, uint64_t seed, const TimedWindow& window = {});

// As time_device_decode, but every step a slot step (SPEC section 7): B = initial.batch sequences in
// the non-contiguous slots 4b + 1 of a pool of 4B slots, stepped in place as a serving loop does;
// what the pool costs over a dense step.
DecodeTiming time_device_decode_slots(Engine& engine, const State& initial, int tokens, int warmup, int repeats,
                                      int rotations, uint64_t seed, const TimedWindow& window = {});

// The anchor, cuBLAS's FFN GEMMs alone (CublasFfnGemms), for `batch` sequences of w's model:
// one token step's GEMMs captured in a CUDA graph, launched `tokens` times per run, timed as
// time_device_decode times a backend. `algorithms`, when given, receives cuBLASLt's picks. operands:
// bf16 (the anchor of the bf16 backends), e4m3_blocks (the fp8 recipe: the anchor of the fp8
// backends), or the coarser e4m3 scalings (bench --fp8-headroom).
DecodeTiming time_cublas_ffn_gemms(const Weights& w, int64_t batch, int tokens, int warmup, int repeats, uint64_t seed,
                                   const TimedWindow& window = {}, std::string* algorithms = nullptr,
                                   AnchorOperands operands = AnchorOperands::bf16());

}  // namespace swapffn::cuda
