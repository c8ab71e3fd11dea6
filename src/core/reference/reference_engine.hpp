// The CPU reference backend (SPEC sections 4-5): fp32 activations, fp64 accumulation of dot products.
#pragma once
#include <memory>

#include "swapffn/engine.hpp"

namespace swapffn::reference {

std::unique_ptr<Engine> make_reference_engine(const Weights& w, const EngineOptions& opt);

}  // namespace swapffn::reference
