// The backend registry: the one place above core and the backends that knows them all.
#include "swapffn/backends.hpp"

#include "core/reference/reference_engine.hpp"
#include "swapffn/error.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "cuda/backends.hpp"
#endif

namespace swapffn {

std::vector<std::string> backend_names() {
#ifdef SWAPFFN_WITH_CUDA
  return {"reference", "unfused", "fused", "fused-fp8"};
#else
  return {"reference"};
#endif
}

std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt) {
  w.validate();
  // Kernel choices exist only in the fused backends; another backend given them would ignore them.
  if (backend != "fused" && backend != "fused-fp8") {
    SWAPFFN_REQUIRE(!opt.fused.any(), "kernel choices (" + opt.fused.describe() +
                                          ") apply to the fused backend only, not '" + backend + "'");
  }
  if (backend == "reference") return reference::make_reference_engine(w, opt);
#ifdef SWAPFFN_WITH_CUDA
  if (backend == "unfused") return cuda::make_unfused_engine(w, opt);
  if (backend == "fused") return cuda::make_fused_engine(w, opt);
  if (backend == "fused-fp8") return cuda::make_fused_fp8_engine(w, opt);
#else
  if (backend == "unfused" || backend == "fused" || backend == "fused-fp8")
    SWAPFFN_FAIL("backend '" + backend + "' needs a CUDA build (this build has no CUDA)");
#endif
  std::string known;
  for (const auto& b : backend_names()) known += (known.empty() ? "" : ", ") + b;
  SWAPFFN_FAIL("unknown backend '" + backend + "' (known: " + known + ")");
}

}  // namespace swapffn
