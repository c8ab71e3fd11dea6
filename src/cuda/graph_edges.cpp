#include "cuda/graph_edges.hpp"

#include <mutex>
#include <unordered_set>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace swapffn::cuda {
namespace {

struct OwnKernels {
  std::mutex mutex;
  std::unordered_set<const void*> funcs;
};
OwnKernels& own_kernels() {
  static OwnKernels k;
  return k;
}

// Whether `node` is a kernel node of a library: a kernel whose function we did not launch. A node
// whose parameters the runtime cannot report (a driver-API launch) is a library's.
bool is_library_kernel(cudaGraphNode_t node) {
  cudaGraphNodeType type{};
  CUDA_CHECK(cudaGraphNodeGetType(node, &type));
  if (type != cudaGraphNodeTypeKernel) return false;
  cudaKernelNodeParams params{};
  if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky; cleared so that the next launch check does not see it
    return true;
  }
  return !is_own_kernel(params.func);
}

}  // namespace

void note_own_kernel(const void* func) {
  OwnKernels& k = own_kernels();
  const std::lock_guard<std::mutex> lock(k.mutex);
  k.funcs.insert(func);
}

bool is_own_kernel(const void* func) {
  OwnKernels& k = own_kernels();
  const std::lock_guard<std::mutex> lock(k.mutex);
  return k.funcs.count(func) != 0;
}

int launch_after_library_kernels_begin(cudaGraph_t graph) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
  int rewritten = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i].type != cudaGraphDependencyTypeProgrammatic || data[i].from_port != cudaGraphKernelNodePortProgrammatic ||
        !is_library_kernel(from[i]))
      continue;
    cudaGraphEdgeData early = data[i];
    early.from_port = cudaGraphKernelNodePortLaunchCompletion;
    CUDA_CHECK(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1));
    CUDA_CHECK(cudaGraphAddDependencies(graph, &from[i], &to[i], &early, 1));
    ++rewritten;
  }
  return rewritten;
}

}  // namespace swapffn::cuda
