// What GPU (if any) this process can use. Works in CPU-only builds (then: none).
#pragma once
#include <cstddef>
#include <string>

namespace swapffn {

struct GpuInfo {
  bool present = false;
  // When !present, one plain sentence: "this build of swapffn has no CUDA support", "no NVIDIA
  // driver is installed", "no NVIDIA GPU was found", ...
  std::string why_absent;
  std::string name;
  int sm_count = 0, cc_major = 0, cc_minor = 0;
  size_t l2_bytes = 0, smem_per_block_optin = 0, global_mem_bytes = 0;
  int driver_version = 0, runtime_version = 0;
  bool is_hopper() const { return present && cc_major == 9; }
  // Why the GPU backends cannot run here, as one sentence; empty on a Hopper GPU.
  std::string why_not_hopper() const {
    if (!present) return why_absent;
    if (is_hopper()) return "";
    return "the GPU " + name + " is compute capability " + std::to_string(cc_major) + "." +
           std::to_string(cc_minor) + ", and the GPU backends need Hopper (9.0)";
  }
};

GpuInfo query_gpu();

// Makes `device` the GPU this thread's engines run on (CUDA's current device); throws naming the
// device and the count when there is no such GPU. Device 0 is accepted without a GPU (the reference
// runs on the host).
void select_gpu(int device);

// The SM count of a CUDA device; whether a CUDA stream (a cudaStream_t) is capturing a graph.
// CUDA builds only (others throw).
int gpu_sm_count(int device);
bool stream_capturing(void* stream);

// select_gpu(device) for a scope: the thread's previous current device is restored at its end (a
// caller's, torch's say, may be another). Without a GPU, device 0 is the host and nothing changes.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace swapffn
