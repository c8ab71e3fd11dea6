#include "cuda/runtime/cuda_check.hpp"

#include <string>

namespace swapffn::cuda {

void throw_cuda(const char* file, int line, const char* call, cudaError_t e) {
  throw_internal_error(file, line, std::string(call) + " failed: " + cudaGetErrorName(e) + " (" +
                                       cudaGetErrorString(e) + ")");
}

void throw_cublas(const char* file, int line, const char* call, cublasStatus_t s) {
  throw_internal_error(file, line, std::string(call) + " failed: " + cublasGetStatusName(s) + " (" +
                                       cublasGetStatusString(s) + ")");
}

}  // namespace swapffn::cuda
