// The rows of `swapffn bench`, and what each row is set against, named in one place: the report and
// the JSON take every pairing from the row itself, never from its name.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "bench/anchor_operands.hpp"
#include "bench/telemetry.hpp"

namespace swapffn::bench {

struct BenchRow {
  std::string name;  // a backend, a backend's slot step ("fused[slots]"), an anchor or the python row
  int64_t batch = 0;
  std::string precision = "bf16";  // of the GEMM operands
  bool gemms_alone = false;        // an anchor: its TF/s count the FFN's FLOPs only
  std::string vs_gemms;   // the GEMMs-alone row of its precision ("vs GEMMs")
  std::string bf16_twin;  // an fp8 row: the bf16 row of the same work ("fp8 over bf16")
  std::string dense;      // a slot-step row: the dense step it is set against
  std::string cpp_slots;  // the python row: the C++ slot step it calls

  // Measured.
  double ms = 0;
  double matched_floor_tflops = 0;  // the floor GEMM under this point's load history (GPU points)
  double spread = 0;                // (slowest - fastest) / median of the timed runs (GPU points)
  double same_process_cpp_ms = 0;   // python row: the engine's own slot-step replays, in the row's process
  std::optional<TelemetrySummary> telemetry, matched_floor_telemetry;
};

// A GEMMs-alone anchor: cuBLAS's FFN GEMMs with these operands.
struct AnchorSpec {
  const char* name;
  cuda::AnchorOperands operands;
  bool headroom;  // timed only with --fp8-headroom (else: bf16 always, the recipe's with an fp8 backend)
};
inline constexpr AnchorSpec kAnchors[] = {
    {"cublas-ffn-gemms", cuda::AnchorOperands::bf16, false},          // the anchor of the bf16 backends
    {"cublas-fp8-gemms", cuda::AnchorOperands::e4m3_blocks, false},   // of the fp8 backends (the recipe)
    {"cublas-fp8-rows", cuda::AnchorOperands::e4m3_rows, true},       // per row of x and u, per channel of W
    {"cublas-fp8-tensor", cuda::AnchorOperands::e4m3_tensor, true},   // per tensor
};
inline constexpr const char* kPythonRow = "python[slots]";  // fused[slots] through the Python API (--python)

BenchRow anchor_row(const AnchorSpec& a, int64_t batch);
// An engine's dense step (precision: Engine::precision()).
BenchRow backend_row(const std::string& backend, const std::string& precision, int64_t batch);
// The same engine's step through a state pool (SPEC section 7), set against its dense step.
BenchRow slot_row(const std::string& backend, int64_t batch);
// The fused slot step through the Python API, set against the C++ slot step.
BenchRow python_row(int64_t batch);

// The anchor of a precision's rows ("bf16" or "fp8"), and the bf16 backend an fp8 backend is
// paired with ("" when it has none).
const char* anchor_of(const std::string& precision);
std::string bf16_backend_of(const std::string& fp8_backend);

}  // namespace swapffn::bench
