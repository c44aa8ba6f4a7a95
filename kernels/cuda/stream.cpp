// The thread-local current CUDA stream, and the current device's multiprocessor count.
#include "kernels/cuda/stream.h"

#include "kernels/cuda/check.h"

namespace nmt::cuda {
namespace {

thread_local cudaStream_t g_current_stream = nullptr;

}  // namespace

cudaStream_t current_stream() {
  return g_current_stream;
}

void set_current_stream(cudaStream_t stream) {
  g_current_stream = stream;
}

int multiprocessor_count() {
  thread_local int cached[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) device = 0;
  if (cached[device] == 0)
    CUDA_CHECK(cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device));
  return cached[device];
}

size_t free_device_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the caller only plans with the answer
    return 0;
  }
  return free_bytes;
}

}  // namespace nmt::cuda
