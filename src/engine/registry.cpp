// The backend registry: the one place above core and the backends that knows them all.
#include "swapffn/backends.hpp"

#include "core/reference/reference_engine.hpp"
#include "swapffn/error.hpp"
#ifdef SWAPFFN_WITH_CUDA
#include "cuda/backends.hpp"
#endif

namespace swapffn {

namespace {

#ifdef SWAPFFN_WITH_CUDA
constexpr bool kHaveCuda = true;
#define SWAPFFN_CUDA_FACTORY(f) &cuda::f
#else
constexpr bool kHaveCuda = false;
#define SWAPFFN_CUDA_FACTORY(f) nullptr
#endif

// The reference takes fp8 models: it runs their dequantised weights in fp32, which is what `check`
// compares an fp8 path with. Only fused has a tuning cache: fused-fp8's choices are few enough to
// pin (--kernels).
constexpr BackendFacts kBackends[] = {
    {"reference", Precision::fp32, false, true, false, false, nullptr, &reference::make_reference_engine},
    {"unfused", Precision::bf16, true, false, false, false, nullptr, SWAPFFN_CUDA_FACTORY(make_unfused_engine)},
    {"fused", Precision::bf16, true, false, true, true, nullptr, SWAPFFN_CUDA_FACTORY(make_fused_engine)},
    {"fused-fp8", Precision::fp8, true, true, true, false, "fused", SWAPFFN_CUDA_FACTORY(make_fused_fp8_engine)},
};
#undef SWAPFFN_CUDA_FACTORY

bool compiled(const BackendFacts& b) { return kHaveCuda || !b.needs_cuda; }

}  // namespace

std::span<const BackendFacts> all_backends() { return kBackends; }

const BackendFacts& backend_facts(const std::string& name) {
  for (const BackendFacts& b : kBackends)
    if (name == b.name) return b;
  std::string known;
  for (const auto& b : backend_names()) known += (known.empty() ? "" : ", ") + b;
  SWAPFFN_FAIL("unknown backend '" + name + "' (known: " + known + ", or " + kAutoBackend + ")");
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendFacts& b : kBackends)
    if (compiled(b)) names.push_back(b.name);
  return names;
}

std::vector<std::string> runnable_backends(const GpuInfo& gpu) {
  std::vector<std::string> names;
  for (const BackendFacts& b : kBackends)
    if (compiled(b) && (!b.needs_cuda || gpu.is_hopper())) names.push_back(b.name);
  return names;
}

ResolvedBackend resolve_backend(const std::string& name, const GpuInfo& gpu, bool fp8_model) {
  if (name != kAutoBackend) return {name, ""};
  if (kHaveCuda && gpu.is_hopper()) {
    const std::string fused = fp8_model ? "fused-fp8" : "fused";
    return {fused, "backend auto: " + fused + " (the Hopper GPU " + gpu.name + ")"};
  }
  const std::string why = kHaveCuda ? gpu.why_not_hopper() : "this build of swapffn has no CUDA support";
  return {"reference", "backend auto: reference on the CPU (" + why + ")"};
}

// The weights are validated once, by the engine's constructor (CoreTables::compute): the fp8
// check alone is ~19 ms on the default model.
std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt) {
  const std::string name =
      backend == kAutoBackend ? resolve_backend(backend, query_gpu(), w.fp8_ffn.has_value()).name : backend;
  const BackendFacts& info = backend_facts(name);
  // Before the build's own limits: the remedy is another backend, whatever this build has.
  SWAPFFN_REQUIRE(!w.fp8_ffn || info.takes_fp8_models,
                  "the model stores its FFN in fp8; backend '" + name +
                      "' runs bf16 models: use backend 'fused-fp8' (or 'reference')");
  // A backend given choices it does not take would ignore them.
  SWAPFFN_REQUIRE(info.takes_kernel_choices || !opt.fused.any(),
                  "kernel choices (" + opt.fused.describe() + ") apply to the fused backends only, not '" + name + "'");
  SWAPFFN_REQUIRE(info.takes_tuning || opt.fused.tuned.empty(),
                  "a tuning cache applies to the fused backend only, not '" + name + "'");
  SWAPFFN_REQUIRE(info.factory, "backend '" + name + "' needs a CUDA build (this build has no CUDA)");
  return info.factory(w, opt);
}

}  // namespace swapffn
