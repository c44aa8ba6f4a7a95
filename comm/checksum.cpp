// The tensor checksum on the CPU, and the dispatch to the CUDA kernel (comm/checksum.cu).
#include "comm/checksum.h"

#include <cstring>

#include "comm/checksum_mix.h"

namespace nmt {
namespace comm_detail {

uint64_t checksum_bytes_cpu(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  const int64_t full_words = static_cast<int64_t>(bytes / 4);
  const int64_t words = static_cast<int64_t>((bytes + 3) / 4);
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (int64_t j = 0; j < full_words; ++j) {
    uint32_t word;
    std::memcpy(&word, p + 4 * j, 4);  // the checksum defines words as little-endian (x86, ARM)
    sum += checksum_mix(word, static_cast<uint64_t>(j));
  }
  for (int64_t j = full_words; j < words; ++j) {
    sum +=
        checksum_mix(checksum_word(p, bytes, static_cast<uint64_t>(j)), static_cast<uint64_t>(j));
  }
  return sum;
}

}  // namespace comm_detail

uint64_t tensor_checksum(const Tensor& t, cudaStream_t stream) {
  const uint64_t bytes = t.bytes();
  // The length takes part too, so trailing zero bytes and the zero padding of the last word differ.
  const uint64_t length =
      comm_detail::checksum_mix(static_cast<uint32_t>(bytes), ~uint64_t{0}) +
      comm_detail::checksum_mix(static_cast<uint32_t>(bytes >> 32), ~uint64_t{1});
  if (bytes == 0) return length;
  if (t.device == Device::cuda) {
    return length + comm_detail::checksum_bytes_cuda(t.data, bytes, stream);
  }
  return length + comm_detail::checksum_bytes_cpu(t.data, bytes);
}

}  // namespace nmt
