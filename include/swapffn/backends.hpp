// The backends compiled into this build, by name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "swapffn/engine.hpp"

namespace swapffn {

// "reference", and "unfused", "fused" and "fused-fp8" with CUDA.
std::vector<std::string> backend_names();
// Creates a backend by name; throws naming the backend when it is unknown or cannot run w's config,
// and when a backend other than fused or fused-fp8 is given fused kernel choices.
std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt = {});

}  // namespace swapffn
