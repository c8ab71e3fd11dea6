// The split-K / fp16-A workspace of each NVFP4 call from Python (nvfp4.hpp, Workspace), in C++ with
// no host synchronisation. Outside a CUDA graph capture: one per stream (by its process-unique id, so
// a new stream never inherits a destroyed one's), its counters zeroed when allocated, grown by a
// stream-ordered free and allocation (cudaFreeAsync / cudaMallocAsync), so it is reused by every call
// on that stream, in order, as the kernels leave the counters zeroed. At most 64 streams per device
// keep one (torch's stream pool has 32 per priority): a stream beyond them frees the least recently
// used one on an internal stream after that workspace's last use (an event recorded after each call,
// also one that throws: the stream it served may be gone), so a server that makes streams as it goes
// holds bounded memory, and no caller waits for another stream's work.
// During a capture: one per call, allocated, zeroed and freed on the capturing stream, so that the
// graph holds it as memory nodes: it lives as long as the graph, each replay zeroes its counters
// again, and the graph can be replayed any number of times (its allocation is freed in the graph).
// Calls hold the GIL from lease to launch: a stream's workspace cannot grow under a call in between.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "swapffn/nvfp4/nvfp4.hpp"

namespace swapffn::nvfp4::python {

struct StreamWorkspace;

class WorkspaceLease {
 public:
  WorkspaceLease(int device, cudaStream_t stream, size_t bytes);
  // A capture's workspace is freed after the call's kernels, in stream order; a stream's is marked
  // used up to here if launched() was not reached (a call that threw after enqueueing work).
  ~WorkspaceLease();
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
  mutable bool marked_ = false;      // launched() recorded the last use
};

// How many streams of `device` keep a workspace now, and at most how many may (64; the tests lower
// it to make streams evict each other). Under the GIL.
size_t stream_workspaces(int device);
size_t stream_workspace_limit();
void set_stream_workspace_limit(size_t n);

}  // namespace swapffn::nvfp4::python
