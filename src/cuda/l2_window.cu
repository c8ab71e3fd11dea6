#include "cuda/l2_window.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "swapffn/error.hpp"

namespace swapffn::cuda {

L2Window::L2Window(const void* base, size_t bytes, double hit_fraction) {
  SWAPFFN_REQUIRE(base != nullptr && bytes > 0, "L2 window: empty address range");
  SWAPFFN_REQUIRE(hit_fraction > 0 && hit_fraction <= 1,
                  "L2 window: the persisting fraction must be in (0, 1], got " + std::to_string(hit_fraction));
  int dev = 0, max_persisting = 0, max_window = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev));
  SWAPFFN_REQUIRE(max_persisting > 0 && max_window > 0,
                  "L2 window: this device has no persisting L2 (max persisting size " + std::to_string(max_persisting) +
                      " bytes, max window " + std::to_string(max_window) + " bytes)");
  hit_fraction_ = hit_fraction;
  window_.base_ptr = const_cast<void*>(base);
  window_.num_bytes = std::min(bytes, static_cast<size_t>(max_window));
  max_carve_out_ = static_cast<size_t>(max_persisting);
  carve_out_ = std::min(window_.num_bytes, max_carve_out_);
  // A hit ratio above carve-out / window would make the window's own lines evict each other.
  window_.hitRatio = static_cast<float>(
      std::min(hit_fraction, static_cast<double>(carve_out_) / static_cast<double>(window_.num_bytes)));
  window_.hitProp = cudaAccessPropertyPersisting;
  window_.missProp = cudaAccessPropertyStreaming;
  CUDA_CHECK(cudaDeviceGetLimit(&previous_limit_, cudaLimitPersistingL2CacheSize));
  CUDA_CHECK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, carve_out_));
}

L2Window::~L2Window() {
  // Nobody is left to report a failure to at teardown; the limit and the lines go back regardless.
  cudaCtxResetPersistingL2Cache();
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, previous_limit_);
}

void L2Window::apply(cudaStream_t stream) const {
  cudaStreamAttrValue v{};
  v.accessPolicyWindow = window_;
  CUDA_CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &v));
}

void L2Window::apply(cudaGraph_t graph) const {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  cudaKernelNodeAttrValue v{};
  v.accessPolicyWindow = window_;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel)
      CUDA_CHECK(cudaGraphKernelNodeSetAttribute(node, cudaKernelNodeAttributeAccessPolicyWindow, &v));
  }
}

void L2Window::clear(cudaStream_t stream) {
  cudaStreamAttrValue v{};
  v.accessPolicyWindow.num_bytes = 0;
  CUDA_CHECK(cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &v));
}

}  // namespace swapffn::cuda
