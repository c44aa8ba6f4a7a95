// visible_cuda_devices and require_cuda_device: cudaGetDeviceCount, its error cleared and reported
// in words.
#include "engine/model/cuda_device_check.h"

#include <cuda_runtime.h>

#include <stdexcept>

namespace nmt {

int visible_cuda_devices(std::string* reason) {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaSuccess && devices > 0) return devices;
  if (reason != nullptr) *reason = status == cudaSuccess ? "0 devices" : cudaGetErrorString(status);
  (void)cudaGetLastError();  // clear the sticky "no device/driver" error
  return 0;
}

void require_cuda_device(const std::string& setting, const std::string& how_to_use_cpu) {
  std::string reason;
  if (visible_cuda_devices(&reason) > 0) return;
  throw std::runtime_error(setting + ": no GPU was found (" + reason + "); " + how_to_use_cpu);
}

}  // namespace nmt
