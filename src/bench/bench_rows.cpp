#include "bench/bench_rows.hpp"

#include <utility>

namespace swapffn::cuda {

std::string anchor_operands_name(AnchorOperands o) {
  switch (o) {
    case AnchorOperands::bf16: return "bf16";
    case AnchorOperands::e4m3_blocks: return "block-scaled e4m3";
    case AnchorOperands::e4m3_rows: return "row-scaled e4m3";
    case AnchorOperands::e4m3_tensor: return "tensor-scaled e4m3";
  }
  return "?";
}

}  // namespace swapffn::cuda

namespace swapffn::bench {
namespace {

// Each fp8 backend and the bf16 backend that runs the same step with bf16 GEMMs.
constexpr std::pair<const char*, const char*> kFp8Twins[] = {{"fused-fp8", "fused"}};

}  // namespace

const char* anchor_of(const std::string& precision) { return precision == "fp8" ? kAnchors[1].name : kAnchors[0].name; }

std::string bf16_backend_of(const std::string& fp8_backend) {
  for (const auto& [fp8, bf16] : kFp8Twins)
    if (fp8_backend == fp8) return bf16;
  return "";
}

BenchRow anchor_row(const AnchorSpec& a, int64_t batch) {
  BenchRow r;
  r.name = a.name;
  r.batch = batch;
  r.gemms_alone = true;
  if (a.operands != cuda::AnchorOperands::bf16) {
    r.precision = "fp8";
    r.bf16_twin = kAnchors[0].name;
  }
  r.vs_gemms = anchor_of(r.precision);
  return r;
}

BenchRow backend_row(const std::string& backend, const std::string& precision, int64_t batch) {
  BenchRow r;
  r.name = backend;
  r.batch = batch;
  r.precision = precision;
  r.vs_gemms = anchor_of(precision);
  if (precision == "fp8") r.bf16_twin = bf16_backend_of(backend);
  return r;
}

BenchRow slot_row(const std::string& backend, int64_t batch) {
  BenchRow r = backend_row(backend, "bf16", batch);
  r.name = backend + "[slots]";
  r.dense = backend;
  return r;
}

BenchRow python_row(int64_t batch) {
  BenchRow r = backend_row(kPythonRow, "bf16", batch);
  r.dense = "fused";
  r.cpp_slots = "fused[slots]";
  return r;
}

}  // namespace swapffn::bench
