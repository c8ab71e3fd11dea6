// Placeholder until the unfused backend lands.
#include "cuda/backends.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

std::unique_ptr<Engine> make_unfused_engine(const Weights&, const EngineOptions&) {
  SWAPFFN_FAIL("backend 'unfused' is not implemented yet");
}

}  // namespace swapffn::cuda
