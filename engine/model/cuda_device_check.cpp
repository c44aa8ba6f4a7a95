// require_cuda_device: cudaGetDeviceCount, its error cleared and reported in words.
#include "engine/model/cuda_device_check.h"

#include <cuda_runtime.h>

#include <stdexcept>

namespace nmt {

void require_cuda_device(const std::string& setting, const std::string& how_to_use_cpu) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaSuccess && devices > 0) return;
  std::string reason = status == cudaSuccess ? "0 devices" : cudaGetErrorString(status);
  (void)cudaGetLastError();  // clear the sticky "no device/driver" error
  throw std::runtime_error(setting + ": no GPU was found (" + reason + "); " + how_to_use_cpu);
}

}  // namespace nmt
