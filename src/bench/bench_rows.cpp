#include "bench/bench_rows.hpp"

#include <utility>

#include "swapffn/backends.hpp"

namespace swapffn::cuda {

std::string anchor_operands_name(AnchorOperands o) {
  if (!o.e4m3) return "bf16";
  return std::string(o.scaling ? fp8::scaling_name(*o.scaling) : "tensor") + "-scaled e4m3";
}

}  // namespace swapffn::cuda

namespace swapffn::bench {

const char* anchor_of(const std::string& precision) { return precision == "fp8" ? kAnchors[1].name : kAnchors[0].name; }

constexpr const char* kRowsSuffix = "[rows]";

std::string fp8_row_name(const std::string& backend, fp8::Scaling s) {
  return s == fp8::Scaling::rows ? backend + kRowsSuffix : backend;
}

std::string bf16_backend_of(const std::string& fp8_row) {
  for (const BackendFacts& b : all_backends())
    if (b.bf16_twin && (fp8_row == b.name || fp8_row == fp8_row_name(b.name, fp8::Scaling::rows))) return b.bf16_twin;
  return "";
}

BenchRow anchor_row(const AnchorSpec& a, int64_t batch) {
  BenchRow r;
  r.name = a.name;
  r.batch = batch;
  r.gemms_alone = true;
  if (a.operands.e4m3) {
    r.precision = "fp8";
    r.bf16_twin = kAnchors[0].name;
  }
  r.vs_gemms = anchor_of(r.precision);
  return r;
}

BenchRow backend_row(const std::string& name, const std::string& precision, int64_t batch) {
  BenchRow r;
  r.name = name;
  r.batch = batch;
  r.precision = precision;
  r.vs_gemms = anchor_of(precision);
  if (precision == "fp8") {
    r.bf16_twin = bf16_backend_of(name);
    for (const BackendFacts& b : all_backends())
      if (b.bf16_twin && name == fp8_row_name(b.name, fp8::Scaling::rows)) r.vs_gemms = kAnchors[2].name;
  }
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
