// Pinned host memory for a training step's inputs on their way to the GPU. A copy from pageable
// memory waits for the stream to drain before it starts and returns once staged, so a step's
// several small uploads each held the host while the GPU idled; from pinned memory each copy is
// enqueued behind the work before it, and the host goes on to launch the step.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace nmt::cuda {

class UploadStaging {
 public:
  explicit UploadStaging(size_t bytes);
  ~UploadStaging();
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;

  size_t bytes() const { return bytes_; }
  // The staging memory to fill, once every copy of the previous round has left it.
  void* begin();
  // Copies bytes [offset, offset + count) of the staging memory to dst (GPU memory) on the current
  // stream, asynchronously.
  void copy(size_t offset, void* dst, size_t count);
  // Ends the round: the next begin() waits until its copies have run.
  void end();

 private:
  void* host_ = nullptr;
  size_t bytes_ = 0;
  cudaEvent_t copied_ = nullptr;
  bool pending_ = false;
};

}  // namespace nmt::cuda
