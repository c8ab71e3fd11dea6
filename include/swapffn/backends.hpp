// The backends compiled into this build, by name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "swapffn/engine.hpp"

namespace swapffn {

// "reference", and "unfused", "fused" and "fused-fp8" with CUDA.
std::vector<std::string> backend_names();
// Whether a backend runs models whose FFN is stored in fp8 (Weights::fp8_ffn); false for an
// unknown name. make_engine refuses the others such a model, naming the backend to use instead.
bool backend_takes_fp8_models(const std::string& backend);
// Creates a backend by name; throws naming the backend when it is unknown or cannot run w's config
// or its fp8 FFN, and when a backend other than fused or fused-fp8 is given fused kernel choices.
std::unique_ptr<Engine> make_engine(const std::string& backend, const Weights& w, const EngineOptions& opt = {});

}  // namespace swapffn
