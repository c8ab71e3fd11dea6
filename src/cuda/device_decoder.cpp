#include "cuda/device_decoder.hpp"

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::router_swap: return "router+swap";
    case Phase::ffn_gemm: return "FFN GEMMs";
    case Phase::elementwise: return "elementwise";
    case Phase::collapse: return "collapse";
  }
  return "?";
}

PhaseTimer::~PhaseTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t PhaseTimer::next_event() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    phases_.push_back(-1);
  }
  return events_[used_++];
}

void PhaseTimer::mark(Phase p) {
  cudaEvent_t e = next_event();
  phases_[used_ - 1] = static_cast<int>(p);
  CUDA_CHECK(cudaEventRecord(e, stream_));
}

void PhaseTimer::stop() {
  cudaEvent_t e = next_event();
  phases_[used_ - 1] = -1;
  CUDA_CHECK(cudaEventRecord(e, stream_));
}

void PhaseTimer::collect(std::array<double, kPhaseCount>& ms) {
  if (used_ == 0) return;
  CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
  for (size_t i = 0; i + 1 < used_; ++i) {
    if (phases_[i] < 0) continue;
    float t = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&t, events_[i], events_[i + 1]));
    ms[static_cast<size_t>(phases_[i])] += t;
  }
  used_ = 0;
}

}  // namespace swapffn::cuda
