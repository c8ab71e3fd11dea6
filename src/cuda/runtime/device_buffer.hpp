// DeviceBuffer<T>: an owning cudaMalloc'd array (no managed memory) with checked copies.
// Reallocation only grows; the contents are not preserved across a resize. An allocation the GPU
// cannot hold throws OutOfDeviceMemory naming the buffer and the sizes, and leaves the buffer empty.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

// A user-facing error (the caller asked for more than the GPU holds), not an internal one.
class OutOfDeviceMemory : public Error {
 public:
  using Error::Error;
};

// cudaMalloc of n elements of elem_bytes (at least one), for the buffer `what`. Throws
// OutOfDeviceMemory when the product overflows or the GPU cannot hold it (the runtime's
// last-error slot is cleared, so no later launch check reports this allocation), Error otherwise.
void* device_malloc(size_t n, size_t elem_bytes, const char* what);

// "512 bytes", "8.0 MiB", "1.5 GiB": sizes in messages.
std::string format_bytes(double bytes);

// While one lives on this thread, a DeviceBuffer that would (re)allocate throws instead, before
// it frees anything: inside a stream capture an allocation or a free would invalidate the capture.
class NoDeviceAllocation {
 public:
  explicit NoDeviceAllocation(bool on) : prev_(active_) { active_ = prev_ || on; }
  ~NoDeviceAllocation() { active_ = prev_; }
  NoDeviceAllocation(const NoDeviceAllocation&) = delete;
  NoDeviceAllocation& operator=(const NoDeviceAllocation&) = delete;
  static bool active() { return active_; }

 private:
  bool prev_;
  static inline thread_local bool active_ = false;
};

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n, const char* what = "a device buffer") { resize(n, what); }
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
  bool reserve(size_t n, const char* what = "a device buffer") {
    if (n <= n_ && p_) return false;
    resize(n, what);
    return true;
  }
  void resize(size_t n, const char* what = "a device buffer") {
    SWAPFFN_REQUIRE(!NoDeviceAllocation::active(), std::string(what) + " would be allocated inside a CUDA graph "
                                                   "capture: run the step at this size outside the capture first");
    release();
    p_ = static_cast<T*>(device_malloc(n, sizeof(T), what));
    n_ = n;
  }
  void release() {
    if (p_) cudaFree(p_);  // a failing free at teardown has nobody left to report to
    p_ = nullptr;
    n_ = 0;
  }
  void upload(const T* host, size_t n) {
    reserve(n);
    CUDA_CHECK(cudaMemcpy(p_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  // The first n elements, or all of them, copied to the host.
  std::vector<T> download(size_t n) const {
    SWAPFFN_REQUIRE(n <= n_, "download of " + std::to_string(n) + " elements from a buffer of " + std::to_string(n_));
    std::vector<T> host(n);
    if (n > 0) CUDA_CHECK(cudaMemcpy(host.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  std::vector<T> download() const { return download(n_); }

  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace swapffn::cuda
