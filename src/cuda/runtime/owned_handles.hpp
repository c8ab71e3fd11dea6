// Owning RAII handles of the CUDA runtime's and cuBLASLt's objects (a stream, events, a cuBLASLt
// handle): each released on every path out of its scope, a failed creation thrown with the call named.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

struct OwnedTimingEvents {  // a start and a stop event around a timed stretch of a stream
  cudaEvent_t start = nullptr, stop = nullptr;
  OwnedTimingEvents() {
    CUDA_CHECK(cudaEventCreate(&start));
    if (const cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
      cudaEventDestroy(start);  // the destructor does not run when the constructor throws
      CUDA_CHECK(e);
    }
  }
  ~OwnedTimingEvents() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  OwnedTimingEvents(const OwnedTimingEvents&) = delete;
  OwnedTimingEvents& operator=(const OwnedTimingEvents&) = delete;
  float elapsed_ms() const {  // waits for `stop`
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

struct OwnedEvent {  // for ordering streams, not timing
  cudaEvent_t e = nullptr;
  OwnedEvent() { CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming)); }
  ~OwnedEvent() { cudaEventDestroy(e); }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
};

struct OwnedLtHandle {
  cublasLtHandle_t h = nullptr;
  OwnedLtHandle() { CUBLAS_CHECK(cublasLtCreate(&h)); }
  ~OwnedLtHandle() { cublasLtDestroy(h); }
  OwnedLtHandle(const OwnedLtHandle&) = delete;
  OwnedLtHandle& operator=(const OwnedLtHandle&) = delete;
};

}  // namespace swapffn::cuda
