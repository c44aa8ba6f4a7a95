// Whether the wgmma variants of the fused attention kernels can run: the GPU is compute 9.0 and
// this library was compiled for sm_90a (elsewhere kernels/cuda/wgmma.cuh compiles to traps).
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {
namespace {

__global__ void wgmma_probe_kernel(int* available) {
  *available = NMT_WGMMA_AVAILABLE;
}

bool probe() {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  int* flag = nullptr;
  int available = 0;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  wgmma_probe_kernel<<<1, 1>>>(flag);
  CUDA_CHECK(cudaMemcpy(&available, flag, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(flag));
  return available == 1;
}

}  // namespace

bool wgmma_kernels_usable() {
  static const bool usable = probe();  // the engine drives one GPU per process
  return usable;
}

}  // namespace nmt::cuda::flash
