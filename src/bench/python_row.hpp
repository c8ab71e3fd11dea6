// The `python[slots]` row of `swapffn bench --python`: the slot step called through the Python API
// from torch CUDA graphs, timed by `python3 -m swapffn.bench_row` (python/swapffn/bench_row.py) in a
// child process, as the bench times its C++ `fused[slots]` row. Host-only.
#pragma once
#include <cstdint>
#include <string>

namespace swapffn {

struct PythonRowRequest {
  std::string python;  // the interpreter (a command name or a path)
  std::string model;   // the model file the row loads
  std::string backend = "fused";
  std::string kernels;  // the fused backend's choices, as `swapffn run --kernels` takes them
  int64_t batch = 1;
  int tokens = 16, warmup = 2, repeats = 5;
};

struct PythonRowResult {
  bool ran = false;
  double median_ms = 0, min_ms = 0, max_ms = 0;  // per step, when it ran
  double engine_decode_ms = 0;  // the engine's own slot-step replays in the child, alternated with the row
  std::string why_not;                           // one line, when it did not
};

// The interpreter to run: $SWAPFFN_PYTHON when set, else python3.
std::string python_interpreter();

// Runs the row and reads its JSON from the child's stdout (its stderr passes through). A row that
// cannot run here (no interpreter, no swapffn package or torch, no Hopper GPU, a child that fails)
// comes back with why_not set; this never throws for the child's sake.
PythonRowResult run_python_row(const PythonRowRequest& r);

}  // namespace swapffn
