// CapturedGraph: what a callable enqueues on a stream, captured once into an instantiated CUDA graph
// and replayed by launch(). Timing a replay counts the GPU's time only: timing the same launches
// issued from the host counts the host's issue time wherever it exceeds a kernel's (cuBLASLt's calls
// at M = 512 took longer to issue than their kernels ran).
#pragma once
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

class CapturedGraph {
 public:
  template <class Enqueue>
  CapturedGraph(cudaStream_t stream, Enqueue&& enqueue) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &g);  // ends the capture; its error is the one already thrown
      if (g) cudaGraphDestroy(g);
      throw;
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &g);
    if (end != cudaSuccess && g) cudaGraphDestroy(g);
    CUDA_CHECK(end);
    const cudaError_t inst = cudaGraphInstantiate(&exec_, g, 0);
    cudaGraphDestroy(g);
    if (inst != cudaSuccess) exec_ = nullptr;
    CUDA_CHECK(inst);
  }
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace swapffn::cuda
