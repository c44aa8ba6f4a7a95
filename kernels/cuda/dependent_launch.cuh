// Programmatic dependent launch for the memory-bound kernels between the matrix products: such a
// kernel is launched with cudaLaunchAttributeProgrammaticStreamSerialization, so the GPU may start
// its blocks while the kernel before it on the stream finishes (its launch latency hidden behind
// that kernel's last wave), and the kernel's first statement, wait_for_previous_grid(), holds every
// thread until the previous grid has completed and its writes are visible. So the order and the
// results are those of a plain launch. CUDA graph capture keeps the programmatic edges.
// NMT_DEPENDENT_LAUNCH=0 in the environment launches them plainly (for A/B timing).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace nmt::cuda {

// Whether launch_dependent asks for programmatic dependent launch (NMT_DEPENDENT_LAUNCH, default
// on; read once).
bool dependent_launch_enabled();

// The first statement of a kernel launched by launch_dependent (a no-op in a plain launch and
// before Hopper).
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with programmatic dependent launch
// where enabled. The kernel must call wait_for_previous_grid() before it touches memory.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                      cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace nmt::cuda
