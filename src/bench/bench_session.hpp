// The measurements of `swapffn bench`: every row of every batch size, batch by batch (a GPU's clock
// follows its power and temperature, so the rows of one batch size run back to back): the bf16
// anchor first (GPU), the fp8 anchors where asked, then each backend, its slot step and the python
// row. The CLI (apps/cmd_bench.cpp) holds only the flags and the printing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_report.hpp"
#include "swapffn/engine.hpp"
#include "swapffn/fused_options.hpp"
#include "swapffn/state.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::bench {

inline constexpr uint64_t kSeed = 1;  // parameters (without a model file), state and inputs
inline constexpr int64_t kFlipBatch = 4, kFlipTokens = 16;  // the fp8 flip rate over 16 tokens at B = 4

struct BenchOptions {
  std::vector<int64_t> batches{1, 4, 16, 64};
  int tokens = 16, warmup = 2, repeats = 5;
  double cooldown_s = 3;
  bool fp8_headroom = false;  // also the fp8 anchors with coarser scales
  FusedOptions fused;         // the fused backend's choices (pinned, tuned)
  FusedChoice fp8_pinned;     // fused-fp8's pinned choices
  std::string python_model;   // a model file for the python row; "" for none
};

// Host backends (the reference): wall time of decode() over `tokens` steps, median of repeats.
double time_host_decode(Engine& e, const State& initial, const BenchOptions& o);

// Every row; GPU backends and anchors need a CUDA build and a Hopper GPU (the caller has checked).
BenchResults measure(const BenchOptions& o, const Weights& w, const std::vector<std::string>& backends);

}  // namespace swapffn::bench
