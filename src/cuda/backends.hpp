// Factories of the GPU backends (defined in src/cuda/unfused and src/cuda/fused).
#pragma once
#include <memory>

#include "swapffn/engine.hpp"

namespace swapffn::cuda {

std::unique_ptr<Engine> make_unfused_engine(const Weights& w, const EngineOptions& opt);
std::unique_ptr<Engine> make_fused_engine(const Weights& w, const EngineOptions& opt);
std::unique_ptr<Engine> make_fused_fp8_engine(const Weights& w, const EngineOptions& opt);

}  // namespace swapffn::cuda
