// The tensor checksum on the GPU: a grid-stride sum of mixed words, reduced per warp and added
// into one 64-bit counter (integer adds, so the order of the atomics does not change the bits).
#include <cuda_runtime.h>

#include "comm/checksum.h"
#include "comm/checksum_mix.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace nmt::comm_detail {
namespace {

__global__ void checksum_kernel(const unsigned char* data, uint64_t bytes, bool aligned,
                                unsigned long long* total) {
  const uint64_t words = (bytes + 3) / 4;
  const uint64_t full_words = bytes / 4;
  uint64_t sum = 0;
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < words;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    uint32_t word = (aligned && j < full_words) ? reinterpret_cast<const uint32_t*>(data)[j]
                                                : checksum_word(data, bytes, j);
    sum += checksum_mix(word, j);
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(total, static_cast<unsigned long long>(sum));
}

}  // namespace

uint64_t checksum_bytes_cuda(const void* data, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return 0;  // the empty sum, as on the CPU (and a launch of 0 blocks is an error)
  if (stream == nullptr) stream = cuda::current_stream();
  unsigned long long* total = nullptr;
  CUDA_CHECK(cudaMallocAsync(&total, sizeof *total, stream));
  CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof *total, stream));
  const int threads = 256;
  const uint64_t words = (bytes + 3) / 4;
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  uint64_t wanted = (words + threads - 1) / threads;
  int blocks = static_cast<int>(wanted < static_cast<uint64_t>(4 * sms) ? wanted : 4 * sms);
  bool aligned = reinterpret_cast<uintptr_t>(data) % 4 == 0;
  checksum_kernel<<<blocks, threads, 0, stream>>>(static_cast<const unsigned char*>(data), bytes,
                                                  aligned, total);
  CUDA_CHECK_LAUNCH();
  unsigned long long result = 0;
  CUDA_CHECK(cudaMemcpyAsync(&result, total, sizeof result, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaFreeAsync(total, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace nmt::comm_detail
