#include "cuda/cuda_check.hpp"
#include "cuda/kernels/step_io.hpp"

namespace swapffn::cuda {

namespace {
__global__ void set_step_io_kernel(StepIO* io, StepIO value) { *io = value; }

__global__ void advance_step_io_kernel(StepIO* io, int64_t x_stride, int64_t trace_stride) {
  io->x += x_stride;
  io->delta += x_stride;
  if (io->gate) {
    io->gate += trace_stride;
    io->slot += trace_stride;
  }
}
}  // namespace

void launch_set_step_io(StepIO* io, const StepIO& value, cudaStream_t stream) {
  set_step_io_kernel<<<1, 1, 0, stream>>>(io, value);
  SWAPFFN_CHECK_LAUNCH();
}

void launch_advance_step_io(StepIO* io, int64_t x_stride, int64_t trace_stride, cudaStream_t stream) {
  advance_step_io_kernel<<<1, 1, 0, stream>>>(io, x_stride, trace_stride);
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
