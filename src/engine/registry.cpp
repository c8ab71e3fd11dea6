// The backend registry: the one place above core and the backends that knows them all.
#include "swapffn/backends.hpp"

#include <iterator>

#include "core/reference/reference_engine.hpp"
#include "swapffn/error.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "cuda/backends.hpp"
#endif

namespace swapffn {

namespace {

struct BackendInfo {
  const char* name;
  bool needs_cuda;
  bool takes_fp8_models;  // runs a model whose FFN is stored in fp8 (Weights::fp8_ffn)
};
// Every backend of any build. The reference takes fp8 models: it runs their dequantised weights in
// fp32, which is what `check` compares an fp8 path with.
constexpr BackendInfo kBackends[] = {
    {"reference", false, true},
    {"unfused", true, false},
    {"fused", true, false},
    {"fused-fp8", true, true},
};

const BackendInfo* find_backend(const std::string& name) {
  for (const BackendInfo& b : kBackends)
    if (name == b.name) return &b;
  return nullptr;
}

#ifdef SWAPFFN_WITH_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendInfo& b : kBackends)
    if (kHaveCuda || !b.needs_cuda) names.push_back(b.name);
  return names;
}

bool backend_takes_fp8_models(const std::string& backend) {
  const BackendInfo* b = find_backend(backend);
  return b && b->takes_fp8_models;
}

// The weights are validated once, by the engine's constructor (CoreTables::compute): the fp8
// check alone is ~19 ms on the default model.
std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt) {
  const BackendInfo* info = find_backend(backend);
  if (!info) {
    std::string known;
    for (const auto& b : backend_names()) known += (known.empty() ? "" : ", ") + b;
    SWAPFFN_FAIL("unknown backend '" + backend + "' (known: " + known + ")");
  }
  // Before the build's own limits: the remedy is another backend, whatever this build has.
  SWAPFFN_REQUIRE(!w.fp8_ffn || info->takes_fp8_models,
                  "the model stores its FFN in fp8; backend '" + backend +
                      "' runs bf16 models: use backend 'fused-fp8' (or 'reference')");
  // Kernel choices exist only in the fused backends; another backend given them would ignore them.
  if (backend != "fused" && backend != "fused-fp8") {
    SWAPFFN_REQUIRE(!opt.fused.any(), "kernel choices (" + opt.fused.describe() +
                                          ") apply to the fused backend only, not '" + backend + "'");
  }
  SWAPFFN_REQUIRE(kHaveCuda || !info->needs_cuda,
                  "backend '" + backend + "' needs a CUDA build (this build has no CUDA)");
  if (backend == "reference") return reference::make_reference_engine(w, opt);
#ifdef SWAPFFN_WITH_CUDA
  if (backend == "unfused") return cuda::make_unfused_engine(w, opt);
  if (backend == "fused") return cuda::make_fused_engine(w, opt);
  if (backend == "fused-fp8") return cuda::make_fused_fp8_engine(w, opt);
#endif
  SWAPFFN_FAIL("internal: backend '" + backend + "' is listed but has no factory");
}

}  // namespace swapffn
