// The thread-local current CUDA stream: every op of kernels/cuda enqueues its work there.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace nmt::cuda {

// The stream ops of this thread run on (the legacy default stream until one is set).
cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Multiprocessors of the current device (cached per device and thread).
int multiprocessor_count();

// Bytes free on the current device now (cudaMemGetInfo); 0 when the runtime cannot tell.
size_t free_device_memory();

// Sets the current stream for a scope and restores the previous one on exit.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream) : previous_(current_stream()) {
    set_current_stream(stream);
  }
  ~StreamScope() { set_current_stream(previous_); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace nmt::cuda
