// The thread-local current CUDA stream, owned streams and their hand-offs, and the current
// device's multiprocessor count.
#include "kernels/cuda/stream.h"

#include <exception>

#include "kernels/cuda/check.h"
#include "kernels/cuda/scratch.h"

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

OwnedStream::OwnedStream() {
  CUDA_CHECK(cudaGetDevice(&device_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const cudaError_t made = cudaEventCreateWithFlags(&event_, cudaEventDisableTiming);
  if (made != cudaSuccess) {
    cudaStreamDestroy(stream_);
    check_cuda(made, "cudaEventCreateWithFlags", __FILE__, __LINE__);
  }
}

OwnedStream::~OwnedStream() {
  // Errors are deliberately ignored: at process exit the runtime may already be gone. The stream's
  // work finishes before its scratch is freed. The resources are kept per (device, stream), so
  // they are released on the stream's own device, whichever is current now.
  int current = device_;
  cudaGetDevice(&current);
  if (current != device_) cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  release_stream_resources(stream_);
  cudaEventDestroy(event_);
  cudaStreamDestroy(stream_);
  if (current != device_) cudaSetDevice(current);
}

void OwnedStream::wait_for(cudaStream_t other) {
  // cudaStreamWaitEvent waits for the event's state at this call, so one event serves every
  // hand-off in turn.
  CUDA_CHECK(cudaEventRecord(event_, other));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, event_, 0));
}

void OwnedStream::make_wait(cudaStream_t other) {
  CUDA_CHECK(cudaEventRecord(event_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(other, event_, 0));
}

StreamHandoff::StreamHandoff(OwnedStream& stream) : stream_(stream), caller_(current_stream()) {
  stream_.wait_for(caller_);
  set_current_stream(stream_.get());
}

StreamHandoff::~StreamHandoff() {
  set_current_stream(caller_);
  try {
    stream_.make_wait(caller_);
  } catch (const std::exception&) {
    // A destructor does not throw: this fails only when the context itself has failed, which the
    // caller's next checked call reports.
  }
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
