// NMT_HOST_DEVICE: marks small inline functions that the CPU reference and the CUDA kernels share,
// so both backends compute them from one definition.
#pragma once

#if defined(__CUDACC__)
#define NMT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define NMT_HOST_DEVICE inline
#endif
