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
  bool headroom;  // per tensor: timed only with --fp8-headroom (the others: bf16 always, an fp8 scaling's
                  // when a row of that scaling runs, or with --fp8-headroom)
};
inline constexpr AnchorSpec kAnchors[] = {
    {"cublas-ffn-gemms", cuda::AnchorOperands::bf16(), false},  // the anchor of the bf16 backends
    {"cublas-fp8-gemms", cuda::AnchorOperands::scaled(fp8::Scaling::blocks), false},  // fp8, blocks scaling
    {"cublas-fp8-rows", cuda::AnchorOperands::scaled(fp8::Scaling::rows), true},  // per row of x, u; per channel of W
    {"cublas-fp8-tensor", cuda::AnchorOperands::per_tensor(), true},  // per tensor
};
inline constexpr const char* kPythonRow = "python[slots]";  // fused[slots] through the Python API (--python)

BenchRow anchor_row(const AnchorSpec& a, int64_t batch);
// An engine's dense step (precision: Engine::precision()); an fp8 row named by fp8_row_name is set
// against its scaling's anchor.
BenchRow backend_row(const std::string& name, const std::string& precision, int64_t batch);
// The row of an fp8 backend in a scaling: "fused-fp8" (blocks), "fused-fp8[rows]".
std::string fp8_row_name(const std::string& backend, fp8::Scaling s);
// The same engine's step through a state pool (SPEC section 7), set against its dense step.
BenchRow slot_row(const std::string& backend, int64_t batch);
// The fused slot step through the Python API, set against the C++ slot step.
BenchRow python_row(int64_t batch);

// The anchor of a precision's rows ("bf16" or "fp8", the blocks scaling's), and the bf16 backend an
// fp8 row is paired with ("" when it has none).
const char* anchor_of(const std::string& precision);
std::string bf16_backend_of(const std::string& fp8_row);

}  // namespace swapffn::bench
