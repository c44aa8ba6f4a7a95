// A kernel that keeps the GPU busy for a while, so that NVML sees utilisation (GpuMonitor test).
#include <cuda_runtime.h>

#include "test/reporting/gpu_busy.h"

namespace nmt::test {

namespace {

__global__ void spin_kernel(long long cycles, int* sink) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) *sink = 1;  // a side effect keeps the loop
}

}  // namespace

bool keep_gpu_busy(double seconds) {
  int device = 0, clock_khz = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return false;
  int* sink = nullptr;
  if (cudaMalloc(&sink, sizeof(int)) != cudaSuccess) return false;
  // 50 ms kernels back to back: NVML's sample period is 1/6 s to 1 s.
  const long long cycles = static_cast<long long>(clock_khz) * 50;
  for (double done = 0; done < seconds; done += 0.05) spin_kernel<<<sms, 32>>>(cycles, sink);
  bool ok = cudaDeviceSynchronize() == cudaSuccess;
  cudaFree(sink);
  return ok;
}

}  // namespace nmt::test
