#include "workspaces.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::nvfp4::python {
namespace {

// Allocated and its counters zeroed on `stream`, before the kernels that use it.
void* allocate(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
  CUDA_CHECK(cudaMemsetAsync(p, 0, std::min(bytes, kWorkspaceZeroedBytes), stream));
  return p;
}

// The workspaces of the streams (under the GIL). Never destroyed: freeing at exit could run after
// the CUDA runtime has torn the context down.
std::map<std::pair<int, cudaStream_t>, Workspace>& by_stream() {
  static auto* m = new std::map<std::pair<int, cudaStream_t>, Workspace>;
  return *m;
}

}  // namespace

WorkspaceLease::WorkspaceLease(int device, cudaStream_t stream, size_t bytes) : stream_(stream) {
  if (bytes == 0) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    ws_ = {allocate(bytes, stream), bytes};
    own_ = true;
    return;
  }
  Workspace& w = by_stream()[{device, stream}];
  if (w.bytes < bytes) {
    if (w.ptr != nullptr) CUDA_CHECK(cudaFreeAsync(w.ptr, stream));  // after the kernels that used it
    w = {};  // none, should the allocation throw
    w = {allocate(bytes, stream), bytes};
  }
  ws_ = w;
}

WorkspaceLease::~WorkspaceLease() {
  if (own_) cudaFreeAsync(ws_.ptr, stream_);  // nothing to report from a destructor: the capture fails with it
}

}  // namespace swapffn::nvfp4::python
