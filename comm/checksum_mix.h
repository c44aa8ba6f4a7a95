// The per-word mixer of the tensor checksum, shared by the CPU loop and the CUDA kernel so both
// compute the same bits.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NMT_HOST_DEVICE __host__ __device__
#else
#define NMT_HOST_DEVICE
#endif

namespace nmt::comm_detail {

// SplitMix64's finaliser over the word and its position: every input bit affects every output bit.
NMT_HOST_DEVICE inline uint64_t checksum_mix(uint32_t word, uint64_t index) {
  uint64_t x = index * 0x9E3779B97F4A7C15ull + (static_cast<uint64_t>(word) << 1) + 1;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Word j of a byte string of length `bytes`: little-endian, zero-padded past the end.
NMT_HOST_DEVICE inline uint32_t checksum_word(const unsigned char* bytes_ptr, uint64_t bytes,
                                              uint64_t j) {
  uint32_t word = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    uint64_t at = 4 * j + k;
    if (at < bytes) word |= static_cast<uint32_t>(bytes_ptr[at]) << (8 * k);
  }
  return word;
}

}  // namespace nmt::comm_detail
