// Timing helpers of bench-kernels: CUDA-event timing of one op with the L2 cache flushed before
// every run, the median of the runs, GB/s, zeroed device tensors and random device fills.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <initializer_list>

#include "kernels/cuda/check.h"
#include "kernels/tensor.h"

namespace nmt::bench {

class KernelTimer {
 public:
  // `runs` timed runs after `warmups` untimed ones.
  KernelTimer(int runs, int warmups);
  ~KernelTimer();
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

  // Median milliseconds of `op` (enqueued on `stream`), each run preceded by a 256 MB write that
  // evicts the 50-60 MB L2, so every run reads its inputs from device memory.
  double median_ms(const std::function<void()>& op);

 private:
  int runs_, warmups_;
  void* flush_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Bytes moved in `ms` milliseconds, in GB/s.
inline double gb_per_s(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

// GPU memory for one benchmark tensor, zeroed, freed at scope exit.
class DeviceTensor {
 public:
  DeviceTensor(std::initializer_list<int64_t> dims, DType dtype) {
    view = Tensor(nullptr, dtype, Device::cuda, dims);
    CUDA_CHECK(cudaMalloc(&view.data, view.bytes()));
    CUDA_CHECK(cudaMemset(view.data, 0, view.bytes()));
  }
  ~DeviceTensor() { cudaFree(view.data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  Tensor view;
};

// Fills `t` (f32, bf16 or f16 on the GPU) with uniform values in [lo, hi) from a hash of the index.
void fill_uniform(const Tensor& t, float lo, float hi, uint32_t seed);
// Fills an i32 tensor with values in [0, modulo).
void fill_ids(const Tensor& t, int32_t modulo, uint32_t seed);

}  // namespace nmt::bench
