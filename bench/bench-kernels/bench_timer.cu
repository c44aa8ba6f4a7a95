// Timing helpers of bench-kernels: event timing with L2 flushes, and random device fills.
#include <algorithm>
#include <vector>

#include "bench/bench-kernels/bench_timer.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/stream.h"

namespace nmt::bench {
namespace {

constexpr size_t kFlushBytes = size_t{256} << 20;

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ seed;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

template <typename T>
__global__ void fill_uniform_kernel(T* data, int64_t n, float lo, float hi, uint32_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float u = static_cast<float>(hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
  data[i] = cuda::from_float<T>(lo + (hi - lo) * u);
}

__global__ void fill_ids_kernel(int32_t* data, int64_t n, int32_t modulo, uint32_t seed) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) data[i] = static_cast<int32_t>(hash32(i, seed) % static_cast<uint32_t>(modulo));
}

}  // namespace

KernelTimer::KernelTimer(int runs, int warmups) : runs_(runs), warmups_(warmups) {
  CUDA_CHECK(cudaMalloc(&flush_, kFlushBytes));
  CUDA_CHECK(cudaEventCreate(&start_));
  CUDA_CHECK(cudaEventCreate(&stop_));
}

KernelTimer::~KernelTimer() {
  cudaFree(flush_);
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

double KernelTimer::median_ms(const std::function<void()>& op) {
  cudaStream_t stream = cuda::current_stream();
  for (int i = 0; i < warmups_; ++i) op();
  std::vector<double> times;
  for (int i = 0; i < runs_; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush_, i & 0xFF, kFlushBytes, stream));
    CUDA_CHECK(cudaEventRecord(start_, stream));
    op();
    CUDA_CHECK(cudaEventRecord(stop_, stream));
    CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void fill_uniform(const Tensor& t, float lo, float hi, uint32_t seed) {
  const int64_t n = t.numel();
  cudaStream_t stream = cuda::current_stream();
  cuda::dispatch_float_dtype(t.dtype, "fill_uniform", "t", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_uniform_kernel<T>
        <<<cuda::blocks_for(n, 256), 256, 0, stream>>>(static_cast<T*>(t.data), n, lo, hi, seed);
    CUDA_CHECK_LAUNCH();
  });
}

void fill_ids(const Tensor& t, int32_t modulo, uint32_t seed) {
  const int64_t n = t.numel();
  fill_ids_kernel<<<cuda::blocks_for(n, 256), 256, 0, cuda::current_stream()>>>(
      static_cast<int32_t*>(t.data), n, modulo, seed);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nmt::bench
