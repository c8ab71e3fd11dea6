// Backend registry and the parts of the engine interface shared by every backend.
#include "swapffn/engine.hpp"

#include <cmath>

#include "reference/reference_engine.hpp"
#include "swapffn/error.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "cuda/backends.hpp"
#endif

namespace swapffn {

void Trace::resize(int64_t e, int64_t b, int64_t c) {
  events = e;
  batch = b;
  cores = c;
  gate.assign(static_cast<size_t>(e * b * c), 0);
  slot.assign(static_cast<size_t>(e * b * c), 0);
}

void Engine::decode(const float* x, float* delta, int64_t tokens, State& state,
                    std::vector<Trace>* record) {
  const int64_t n = state.batch * config().d_model;
  check_finite(x, tokens * n, "x");
  if (record) record->assign(static_cast<size_t>(tokens), Trace{});
  for (int64_t t = 0; t < tokens; ++t) {
    StepOptions opt;
    if (record) opt.record = &(*record)[static_cast<size_t>(t)];
    step(x + t * n, delta + t * n, state, opt);
  }
}

std::vector<std::string> backend_names() {
#ifdef SWAPFFN_WITH_CUDA
  return {"reference", "unfused", "fused"};
#else
  return {"reference"};
#endif
}

std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w,
                                    const EngineOptions& opt) {
  w.validate();
  // Kernel choices exist only in the fused backend; another backend given them would ignore them.
  if (backend != "fused") {
    SWAPFFN_REQUIRE(opt.kernel_config.empty(), "a kernel config ('" + opt.kernel_config +
                                                   "') applies to the fused backend only, not '" + backend + "'");
    SWAPFFN_REQUIRE(opt.tune_file.empty(), "a tuning cache (" + opt.tune_file +
                                               ") applies to the fused backend only, not '" + backend + "'");
    SWAPFFN_REQUIRE(opt.leave_out.empty(), "leaving kernels out ('" + opt.leave_out +
                                               "') applies to the fused backend only, not '" + backend + "'");
  }
  if (backend == "reference") return reference::make_reference_engine(w, opt);
#ifdef SWAPFFN_WITH_CUDA
  if (backend == "unfused") return cuda::make_unfused_engine(w, opt);
  if (backend == "fused") return cuda::make_fused_engine(w, opt);
#else
  if (backend == "unfused" || backend == "fused")
    SWAPFFN_FAIL("backend '" + backend + "' needs a CUDA build (this build has no CUDA)");
#endif
  std::string known;
  for (const auto& b : backend_names()) known += (known.empty() ? "" : ", ") + b;
  SWAPFFN_FAIL("unknown backend '" + backend + "' (known: " + known + ")");
}

void check_finite(const float* x, int64_t n, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    SWAPFFN_REQUIRE(std::isfinite(x[i]), std::string("non-finite value in ") + what + " at index " +
                                             std::to_string(i) + " (" + std::to_string(x[i]) + ")");
}

}  // namespace swapffn
