// The split-K / fp16-A workspace of each NVFP4 call from Python (nvfp4.hpp, Workspace), in C++ with
// no host synchronisation. Outside a CUDA graph capture: one per stream (by its process-unique id, so
// a new stream never inherits a destroyed one's), its counters zeroed when allocated, grown by a
// stream-ordered free and allocation (cudaFreeAsync / cudaMallocAsync), so it is reused by every call
// on that stream, in order, as the kernels leave the counters zeroed. At most kStreamWorkspaces
// streams per device keep one: a stream beyond them frees the least recently used one, in its own
// order after that workspace's last use (an event recorded after each call: the stream it served may
// be gone), so a server that makes streams as it goes holds bounded memory.
// During a capture: one per call, allocated, zeroed and freed on the capturing stream, so that the
// graph holds it as memory nodes: it lives as long as the graph, each replay zeroes its counters
// again, and the graph can be replayed any number of times (its allocation is freed in the graph).
// Calls hold the GIL from lease to launch: a stream's workspace cannot grow under a call in between.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4::python {

inline constexpr size_t kStreamWorkspaces = 8;

struct StreamWorkspace;

class WorkspaceLease {
 public:
  WorkspaceLease(int device, cudaStream_t stream, size_t bytes);
  ~WorkspaceLease();  // a capture's workspace is freed after the call's kernels, in stream order
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  Workspace get() const { return ws_; }
  // After the call's kernels are enqueued: marks the stream's workspace used up to here.
  void launched() const;

 private:
  Workspace ws_;
  cudaStream_t stream_;
  StreamWorkspace* kept_ = nullptr;  // the stream's workspace (outside a capture)
  bool own_ = false;                 // ws_ is this call's (a capture's), not the stream's
};

// How many streams of `device` keep a workspace now (for the tests).
size_t stream_workspaces(int device);

}  // namespace swapffn::nvfp4::python
