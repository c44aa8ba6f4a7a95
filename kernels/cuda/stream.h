// The thread-local current CUDA stream: every op of kernels/cuda enqueues its work there. And a
// stream of one's own (OwnedStream), handed work in order with the caller's stream
// (StreamHandoff): what a graph capture needs (kernels/cuda/graph.h).
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

// A stream created with cudaStreamNonBlocking (no implicit ordering with the legacy default
// stream, on which graph capture is illegal) on the current device, with an event to order it
// against other streams. Its per-stream resources (kernels/cuda/scratch.h: scratch, cuBLAS
// workspace) are freed with it, when it is destroyed on the thread that used it.
class OwnedStream {
 public:
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  cudaStream_t get() const { return stream_; }
  // This stream waits for the work enqueued on `other` so far; the host does not wait.
  void wait_for(cudaStream_t other);
  // `other` waits for the work enqueued on this stream so far; the host does not wait.
  void make_wait(cudaStream_t other);

 private:
  int device_ = 0;  // the device the stream was created on
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

// Runs a scope's ops on an owned stream, in order with the caller's current stream: on entry the
// owned stream waits for what the caller's stream had enqueued, and on exit the caller's stream
// waits for what the scope enqueued (and becomes current again). To the caller, the scope's work
// is ordered as if it had run on the caller's stream.
class StreamHandoff {
 public:
  explicit StreamHandoff(OwnedStream& stream);
  ~StreamHandoff();
  StreamHandoff(const StreamHandoff&) = delete;
  StreamHandoff& operator=(const StreamHandoff&) = delete;

 private:
  OwnedStream& stream_;
  cudaStream_t caller_;
};

}  // namespace nmt::cuda
