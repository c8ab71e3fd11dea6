// cudaLaunchKernelEx with the launch attributes the backends use: a thread-block cluster shape,
// programmatic dependent launch (PDL: the kernel may start while its predecessor drains; it must
// execute griddepcontrol.wait before touching what the predecessor wrote), and cooperative launch.
#pragma once
#include <atomic>
#include <string>

#include <cuda_runtime.h>

#include "cuda/runtime/cuda_check.hpp"

namespace swapffn::cuda {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// A per-device answer to a device query (an occupancy, the SM count), computed once per device: a
// query can cost microseconds of host time, more than a small kernel (eager steps, timing loops).
// Each caller (kernel variant) keeps its own table; compute() must return a positive count.
inline constexpr int kMaxDevices = 64;
template <class Compute>
int once_per_device(std::atomic<int> (&table)[kMaxDevices], Compute compute) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  SWAPFFN_ASSERT(dev >= 0 && dev < kMaxDevices,
                 "device " + std::to_string(dev) + " is beyond the launchers' per-device tables (" +
                     std::to_string(kMaxDevices) + " devices)");
  int v = table[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    v = compute();
    table[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

// Multiprocessors of the current device (grids sized to the machine: persistent GEMMs, router CTA
// widths), asked of the driver once per device since launchers call it on every launch.
inline int sm_count() {
  static std::atomic<int> table[kMaxDevices];
  return once_per_device(table, [] {
    int dev = 0, n = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  });
}

// Lets `kernel` take smem_bytes of dynamic shared memory (above 48 KB it must opt in).
template <class Kernel>
void allow_dynamic_smem(Kernel kernel, int smem_bytes) {
  if (smem_bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
}

// Thread-block clusters of `kernel` resident at once (cudaOccupancyMaxActiveClusters), and CTAs for
// a kernel launched without clusters: what one wave of the grid holds.
template <class Kernel>
int max_active_clusters(Kernel kernel, dim3 block, dim3 cluster, int smem_bytes) {
  allow_dynamic_smem(kernel, smem_bytes);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(cluster.x, cluster.y, cluster.z);
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = cluster.x;
  attr.val.clusterDim.y = cluster.y;
  attr.val.clusterDim.z = cluster.z;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  return n;
}
template <class Kernel>
int max_ctas_per_wave(Kernel kernel, dim3 block, int smem_bytes) {
  allow_dynamic_smem(kernel, smem_bytes);
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(block.x * block.y * block.z),
                                                           static_cast<size_t>(smem_bytes)));
  return per_sm * sm_count();
}

template <class Kernel, class... Args>
void launch_kernel_ex(Kernel kernel, dim3 grid, dim3 block, dim3 cluster, int smem_bytes, cudaStream_t stream, bool pdl,
                      Args... args) {
  allow_dynamic_smem(kernel, smem_bytes);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster.x;
    attrs[n].val.clusterDim.y = cluster.y;
    attrs[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  SWAPFFN_CHECK_LAUNCH();
}

// A cooperative launch: every block of the grid is resident at once, so the kernel may use grid
// barriers (cooperative_groups::this_grid().sync()). The grid must fit one wave (max_ctas_per_wave).
template <class Kernel, class... Args>
void launch_cooperative(Kernel kernel, dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
  SWAPFFN_CHECK_LAUNCH();
}

}  // namespace swapffn::cuda
