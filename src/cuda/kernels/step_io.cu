#include "cuda/runtime/cuda_check.hpp"
#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

namespace {
__global__ void set_step_io_kernel(StepIO* io, StepIO value) { *io = value; }
}  // namespace

void launch_set_step_io(StepIO* io, const StepIO& value, cudaStream_t stream) {
  set_step_io_kernel<<<1, 1, 0, stream>>>(io, value);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
