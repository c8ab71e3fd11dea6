// Placeholder until the fused backend lands.
#include "cuda/backends.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

std::unique_ptr<Engine> make_fused_engine(const Weights&, const EngineOptions&) {
  SWAPFFN_FAIL("backend 'fused' is not implemented yet");
}

}  // namespace swapffn::cuda
