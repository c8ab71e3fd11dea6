// The backends: what the registry knows of each (one table), and their creation by name.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "swapffn/device.hpp"
#include "swapffn/engine.hpp"

namespace swapffn {

using EngineFactory = std::unique_ptr<Engine> (*)(const Weights&, const EngineOptions&);

// One backend, whatever this build compiled.
struct BackendFacts {
  const char* name;
  Precision precision;        // of its GEMM operands
  bool needs_cuda;            // runs on a Hopper GPU, compiled only with CUDA
  bool takes_fp8_models;      // runs a model whose FFN is stored in fp8 (Weights::fp8_ffn)
  bool takes_kernel_choices;  // FusedOptions::pinned (--kernels)
  bool takes_tuning;          // FusedOptions::tuned (`swapffn tune`'s cache, --tune)
  const char* bf16_twin;      // an fp8 backend's bf16 counterpart (flip rate, speed), else nullptr
  EngineFactory factory;      // nullptr where this build lacks it (no CUDA)
};

// Every backend of any build, in the order the CLI lists them.
std::span<const BackendFacts> all_backends();
// A backend's facts; throws naming the unknown name and the known ones.
const BackendFacts& backend_facts(const std::string& name);

// "reference", and "unfused", "fused" and "fused-fp8" with CUDA.
std::vector<std::string> backend_names();
// Those of backend_names() that can run on `gpu` (the GPU ones need a Hopper GPU).
std::vector<std::string> runnable_backends(const GpuInfo& gpu);

// The name that picks a backend for the machine and model: on a Hopper GPU in a CUDA build fused
// (fused-fp8 for a model stored in fp8), else the reference.
inline constexpr const char* kAutoBackend = "auto";
struct ResolvedBackend {
  std::string name;
  std::string why;  // for "auto": one sentence saying which and why; empty for a named backend
};
// `name` itself, or what "auto" picks on `gpu` for a model whose FFN is (fp8_model) or is not
// stored in fp8.
ResolvedBackend resolve_backend(const std::string& name, const GpuInfo& gpu, bool fp8_model = false);

// Creates a backend by name ("auto" included); throws naming the backend when it is unknown or
// cannot run w's config or its fp8 FFN, and when a backend that takes no kernel choices is given
// some.
std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt = {});

}  // namespace swapffn
