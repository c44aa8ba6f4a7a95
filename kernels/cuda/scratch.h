// Per-(device, stream) resources of the CUDA ops: grow-only device scratch for op temporaries,
// zeroed device counters that persist between ops, the cuBLAS / cuBLASLt workspace, and a pinned
// host slot for results copied back to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

namespace nmt::cuda {

class OwnedStream;  // kernels/cuda/stream.h

// The cuBLASLt / cuBLAS workspace of each stream (NVIDIA recommends 32 MiB on Hopper).
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

// The zeroed counters of each stream: a fixed count, so that they never move once allocated.
constexpr size_t kZeroedCounters = 4096;

// Owned by the calling thread and keyed by (device, stream): ops on one stream run in order, so a
// buffer is never used by two ops at once. Memory is taken on first use and when a larger request
// comes (after synchronising the stream); a training step therefore allocates only in its first
// iteration, and a step captured into a CUDA graph must be preceded by one uncaptured step (or by
// reserve_scratch with the largest size).
class StreamResources {
 public:
  StreamResources() = default;
  ~StreamResources();
  StreamResources(const StreamResources&) = delete;
  StreamResources& operator=(const StreamResources&) = delete;

  // Device memory of at least `bytes`, valid until the next scratch() call on this stream.
  void* scratch(size_t bytes);
  void* blas_workspace();
  // kZeroedCounters device counters, allocated and zeroed on first use only. Unlike scratch they
  // persist between calls, and every op that takes them must leave those it used at zero when its
  // kernels complete (the column sums' last block per tile resets its counter, reduce.cu). That
  // keeps them graph-safe: after the first use (an uncaptured step) a call neither allocates nor
  // clears, the address never changes, and a captured kernel and each replay find them zero.
  unsigned* zeroed_counters();
  // Pinned host memory of at least `bytes`, for results of an op (a reduction's few bytes, beam
  // search's candidates of a step), valid until the next call on this stream's resources.
  void* host_result(size_t bytes);
  // Where the scratch lies now (nullptr before first use). A CUDA graph captured with one address
  // must not be launched once the scratch has grown elsewhere.
  const void* scratch_address() const { return scratch_; }

  // A second stream on this device, created on first use, for work that may run beside this
  // stream's (linear_backward's weight gradients, kernels/cuda/linear.cpp); ordered against this
  // stream only through its events (OwnedStream::wait_for / make_wait). It has resources of its own
  // (scratch, cuBLAS workspace), so the two never share a buffer. Create it outside a graph capture
  // (the uncaptured step before one does).
  OwnedStream& side_stream();
  // Whether side_stream() has been created (a capture may use only one that exists: creating it,
  // and its first resources, would allocate).
  bool has_side_stream() const { return side_ != nullptr; }
  // Where the side stream's scratch lies now (nullptr before its first use): a graph that captured
  // work on it is stale once it moves, as for scratch_address().
  const void* side_scratch_address() const;

  cudaStream_t stream = nullptr;

 private:
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  unsigned* counters_ = nullptr;
  void* blas_workspace_ = nullptr;
  void* host_result_ = nullptr;
  size_t host_result_bytes_ = 0;
  std::unique_ptr<OwnedStream> side_;
};

// The resources of `stream` on the current device, for the calling thread.
StreamResources& stream_resources(cudaStream_t stream);

// Grows the scratch of `stream` to `bytes` now (before graph capture, say).
void reserve_scratch(cudaStream_t stream, size_t bytes);

// Frees the calling thread's resources of `stream` on the current device (its work must be done):
// for a stream about to be destroyed (OwnedStream, kernels/cuda/stream.h), whose handle a later
// stream may reuse. A later use of the stream allocates afresh.
void release_stream_resources(cudaStream_t stream);

// Carves several aligned buffers out of one scratch allocation: add() each size, then take the
// base pointer once and offset it.
class ScratchLayout {
 public:
  // Returns the byte offset of a new buffer of `bytes`, aligned to 256 bytes.
  size_t add(size_t bytes) {
    size_t offset = (total_ + 255) / 256 * 256;
    total_ = offset + bytes;
    return offset;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

template <typename T>
T* at_offset(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace nmt::cuda
