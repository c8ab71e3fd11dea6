// DeviceBuffer<T>: an owning cudaMalloc'd array (no managed memory) with checked copies.
// Reallocation only grows; the contents are not preserved across a resize.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  // Ensures room for n elements; returns true when it reallocated (old pointers are then invalid).
  bool reserve(size_t n) {
    if (n <= n_ && p_) return false;
    resize(n);
    return true;
  }
  void resize(size_t n) {
    release();
    // Allocate at least one element so that every buffer has a valid, 256-byte aligned pointer.
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), (n == 0 ? 1 : n) * sizeof(T)));
    n_ = n;
  }
  void upload(const T* host, size_t n) {
    reserve(n);
    CUDA_CHECK(cudaMemcpy(p_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }

  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_) cudaFree(p_);  // a failing free at teardown has nobody left to report to
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace swapffn::cuda
