// UploadStaging: one pinned buffer, and an event after each round's copies.
#include "kernels/cuda/upload_staging.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda {

UploadStaging::UploadStaging(size_t bytes) : bytes_(bytes) {
  CUDA_CHECK(cudaMallocHost(&host_, bytes > 0 ? bytes : 1));
  CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
}

UploadStaging::~UploadStaging() {
  // At teardown (or process exit, when the runtime may be gone) errors are deliberately ignored;
  // the wait keeps a copy still in flight from reading freed memory.
  if (pending_) cudaEventSynchronize(copied_);
  if (copied_) cudaEventDestroy(copied_);
  if (host_) cudaFreeHost(host_);
}

void* UploadStaging::begin() {
  if (pending_) CUDA_CHECK(cudaEventSynchronize(copied_));
  pending_ = false;
  return host_;
}

void UploadStaging::copy(size_t offset, void* dst, size_t count) {
  if (offset > bytes_ || count > bytes_ - offset)
    throw std::out_of_range("UploadStaging::copy: bytes " + std::to_string(offset) + " + " +
                            std::to_string(count) + " past the staging's " +
                            std::to_string(bytes_));
  if (count == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(host_) + offset, count,
                             cudaMemcpyHostToDevice, current_stream()));
}

void UploadStaging::end() {
  CUDA_CHECK(cudaEventRecord(copied_, current_stream()));
  pending_ = true;
}

}  // namespace nmt::cuda
