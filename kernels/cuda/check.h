// Error checks for CUDA runtime and cuBLAS / cuBLASLt calls: CUDA_CHECK and CUBLAS_CHECK throw a
// std::runtime_error naming the failed call, the file and the line.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace nmt::cuda {

[[noreturn]] inline void throw_cuda_error(const char* what, const char* call, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("CUDA error: ") + what + " in " + call + " at " + file +
                           ":" + std::to_string(line));
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(cudaGetErrorString(status), call, file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw_cuda_error(cublasGetStatusString(status), call, file, line);
}

}  // namespace nmt::cuda

#define CUDA_CHECK(call) ::nmt::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::nmt::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// After a kernel launch: a bad configuration shows up here, not at the next synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
