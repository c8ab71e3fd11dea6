// The split-K / fp16-A workspace of each NVFP4 call from Python (nvfp4.hpp, Workspace), in C++ with
// no host synchronisation. Outside a CUDA graph capture: one per (device, stream), its counters zeroed
// when allocated, grown by a stream-ordered free and allocation (cudaFreeAsync / cudaMallocAsync), so
// it is reused by every call on that stream, in order, as the kernels leave the counters zeroed.
// During a capture: one per call, allocated, zeroed and freed on the capturing stream, so that the
// graph holds it as memory nodes: it lives as long as the graph, each replay zeroes its counters
// again, and the graph can be replayed any number of times (its allocation is freed in the graph).
// Calls hold the GIL from lease to launch: a stream's workspace cannot grow under a call in between.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4::python {

class WorkspaceLease {
 public:
  WorkspaceLease(int device, cudaStream_t stream, size_t bytes);
  ~WorkspaceLease();  // a capture's workspace is freed after the call's kernels, in stream order
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace get() const { return ws_; }

 private:
  Workspace ws_;
  cudaStream_t stream_;
  bool own_ = false;  // ws_ is this call's (a capture's), not the stream's
};

}  // namespace swapffn::nvfp4::python
