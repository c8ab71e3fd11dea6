#include "workspaces.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::nvfp4::python {

struct StreamWorkspace {
  Workspace ws;
  cudaEvent_t last_use = nullptr;  // recorded after each call's kernels
  uint64_t used_at = 0;            // lease count at the last use: the least recent is evicted
};

namespace {

// Allocated and its counters zeroed on `stream`, before the kernels that use it.
void* allocate(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, bytes, stream));
  CUDA_CHECK(cudaMemsetAsync(p, 0, std::min(bytes, kWorkspaceZeroedBytes), stream));
  return p;
}

// The workspaces of the streams by (device, stream id), under the GIL. Never destroyed: freeing at
// exit could run after the CUDA runtime has torn the context down.
using Key = std::pair<int, unsigned long long>;
std::map<Key, StreamWorkspace>& by_stream() {
  static auto* m = new std::map<Key, StreamWorkspace>;
  return *m;
}
uint64_t leases = 0;
size_t limit = 64;

// The stream on which evicted workspaces are freed, per device (created on the current one), so
// that the evicting call's stream does not wait for the victim stream's work.
cudaStream_t reaper(int device) {
  static auto* streams = new std::map<int, cudaStream_t>;
  auto it = streams->find(device);
  if (it == streams->end()) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    it = streams->emplace(device, s).first;
  }
  return it->second;
}

// Frees the least recently used workspace of `device` after its last use.
void evict_one(int device) {
  auto& m = by_stream();
  auto victim = m.end();
  for (auto it = m.lower_bound({device, 0}); it != m.end() && it->first.first == device; ++it)
    if (victim == m.end() || it->second.used_at < victim->second.used_at) victim = it;
  StreamWorkspace& v = victim->second;
  const cudaStream_t r = reaper(device);
  CUDA_CHECK(cudaStreamWaitEvent(r, v.last_use, 0));
  if (v.ws.ptr != nullptr) CUDA_CHECK(cudaFreeAsync(v.ws.ptr, r));
  CUDA_CHECK(cudaEventDestroy(v.last_use));  // released once its work is done
  m.erase(victim);
}

}  // namespace

size_t stream_workspaces(int device) {
  size_t n = 0;
  for (const auto& [key, w] : by_stream()) n += key.first == device;
  return n;
}
size_t stream_workspace_limit() { return limit; }
void set_stream_workspace_limit(size_t n) {
  if (n < 1) throw std::invalid_argument("the stream workspace limit must be at least 1");
  limit = n;  // streams beyond it are evicted as they next need a workspace
}

WorkspaceLease::WorkspaceLease(int device, cudaStream_t stream, size_t bytes) : stream_(stream) {
  if (bytes == 0) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    ws_ = {allocate(bytes, stream), bytes};
    own_ = true;
    return;
  }
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(stream, &id));
  auto& m = by_stream();
  auto it = m.find({device, id});
  if (it == m.end()) {
    while (stream_workspaces(device) >= limit) evict_one(device);
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, stream));  // a last use before any, should the allocation throw
    it = m.emplace(Key{device, id}, StreamWorkspace{{}, e, 0}).first;
  }
  StreamWorkspace& w = it->second;
  if (w.ws.bytes < bytes) {
    if (w.ws.ptr != nullptr) CUDA_CHECK(cudaFreeAsync(w.ws.ptr, stream));  // after the kernels that used it
    w.ws = {};  // none, should the allocation throw
    w.ws = {allocate(bytes, stream), bytes};
  }
  w.used_at = ++leases;
  ws_ = w.ws;
  kept_ = &w;
}

void WorkspaceLease::launched() const {
  if (kept_ == nullptr) return;
  marked_ = true;
  CUDA_CHECK(cudaEventRecord(kept_->last_use, stream_));
}

// Nothing to report from a destructor: a capture fails with its free, and a call that threw reports
// its own error.
WorkspaceLease::~WorkspaceLease() {
  if (own_) cudaFreeAsync(ws_.ptr, stream_);
  if (kept_ != nullptr && !marked_) cudaEventRecord(kept_->last_use, stream_);
}

}  // namespace swapffn::nvfp4::python
