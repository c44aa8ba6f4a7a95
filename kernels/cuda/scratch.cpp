// Per-(device, stream) scratch memory, zeroed counters, cuBLAS workspace and pinned result slots
// of the CUDA ops.
#include "kernels/cuda/scratch.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda {

StreamResources::~StreamResources() {
  // The side stream first: its destructor waits for its work (which may still read tensors this
  // stream's ops wrote) and frees its own resources. At process exit the runtime may already be
  // gone; errors here are deliberately ignored.
  side_.reset();
  if (scratch_) cudaFree(scratch_);
  if (counters_) cudaFree(counters_);
  if (blas_workspace_) cudaFree(blas_workspace_);
  if (host_result_) cudaFreeHost(host_result_);
}

void* StreamResources::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  // Work already queued on this stream may still read the old buffer.
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (scratch_) CUDA_CHECK(cudaFree(scratch_));
  scratch_ = nullptr;
  size_t grown = scratch_bytes_ + scratch_bytes_ / 2;
  size_t size = bytes > grown ? bytes : grown;
  CUDA_CHECK(cudaMalloc(&scratch_, size));
  scratch_bytes_ = size;
  return scratch_;
}

unsigned* StreamResources::zeroed_counters() {
  if (counters_) return counters_;
  CUDA_CHECK(cudaMalloc(&counters_, kZeroedCounters * sizeof(unsigned)));
  // On `stream`, so it is ordered before the stream's later kernels (a plain cudaMemset goes to the
  // legacy stream, which a non-blocking stream does not wait for).
  CUDA_CHECK(cudaMemsetAsync(counters_, 0, kZeroedCounters * sizeof(unsigned), stream));
  return counters_;
}

void* StreamResources::blas_workspace() {
  if (!blas_workspace_) CUDA_CHECK(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes));
  return blas_workspace_;
}

OwnedStream& StreamResources::side_stream() {
  if (!side_) side_ = std::make_unique<OwnedStream>();
  return *side_;
}

const void* StreamResources::side_scratch_address() const {
  return side_ ? stream_resources(side_->get()).scratch_address() : nullptr;
}

void* StreamResources::host_result(size_t bytes) {
  if (bytes <= host_result_bytes_) return host_result_;
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host_result_) CUDA_CHECK(cudaFreeHost(host_result_));
  host_result_ = nullptr;
  size_t size = bytes < 256 ? 256 : bytes;
  CUDA_CHECK(cudaMallocHost(&host_result_, size));
  host_result_bytes_ = size;
  return host_result_;
}

namespace {

using ResourceMap = std::map<std::pair<int, cudaStream_t>, std::unique_ptr<StreamResources>>;

// Set when the calling thread's map is destroyed (thread exit): a stream released after that (an
// OwnedStream in a static object) finds nothing left to free.
thread_local bool thread_resources_gone = false;

struct ThreadResources {
  ResourceMap map;
  ThreadResources() = default;
  ThreadResources(const ThreadResources&) = delete;
  ThreadResources& operator=(const ThreadResources&) = delete;
  ~ThreadResources() { thread_resources_gone = true; }
};

ResourceMap* thread_resources() {
  if (thread_resources_gone) return nullptr;
  thread_local ThreadResources resources;
  return &resources.map;
}

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

StreamResources& stream_resources(cudaStream_t stream) {
  ResourceMap* resources = thread_resources();
  if (resources == nullptr)
    throw std::logic_error("stream_resources: called while the thread's resources are destroyed");
  auto& slot = (*resources)[{current_device(), stream}];
  if (!slot) {
    slot = std::make_unique<StreamResources>();
    slot->stream = stream;
  }
  return *slot;
}

void reserve_scratch(cudaStream_t stream, size_t bytes) {
  stream_resources(stream).scratch(bytes);
}

void release_stream_resources(cudaStream_t stream) {
  ResourceMap* resources = thread_resources();
  int device = 0;
  if (resources == nullptr || cudaGetDevice(&device) != cudaSuccess) return;
  auto found = resources->find({device, stream});
  if (found == resources->end()) return;
  // Out of the map before it is destroyed: destroying it releases its side stream's resources,
  // another erase of this map, which must not run inside this one.
  std::unique_ptr<StreamResources> released = std::move(found->second);
  resources->erase(found);
}

}  // namespace nmt::cuda
