// CUDA / cuBLAS error checks: every call is checked; a failure is an internal error (swapffn/error.hpp):
// swapffn::Error with file:line, the failed call and the driver's message. SWAPFFN_CHECK_LAUNCH
// checks the last error after a launch.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "swapffn/error.hpp"

namespace swapffn::cuda {

[[noreturn]] void throw_cuda(const char* file, int line, const char* call, cudaError_t e);
[[noreturn]] void throw_cublas(const char* file, int line, const char* call, cublasStatus_t s);

}  // namespace swapffn::cuda

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) ::swapffn::cuda::throw_cuda(__FILE__, __LINE__, #call, e_);   \
  } while (0)

#define CUBLAS_CHECK(call)                                                               \
  do {                                                                                   \
    cublasStatus_t s_ = (call);                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::swapffn::cuda::throw_cublas(__FILE__, __LINE__, #call, s_);                      \
  } while (0)

#define SWAPFFN_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
