// A 64-bit checksum of a tensor's bytes, the same on CPU and GPU, cheap enough to compare the
// parameters of every rank now and then (Communicator::verify_identical).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace nmt {

// The bytes are read as little-endian 32-bit words w_j (the last one zero-padded); the checksum
// is the sum mod 2^64 of mix(w_j, j), a strong 64-bit mixer of word and position, plus a mix of
// the byte count. Integer sums do
// not depend on order, so the GPU's parallel sum gives the same bits as the CPU loop; any changed
// bit or swapped word changes it.
// A CUDA tensor is read on `stream` (nullptr: nmt::cuda::current_stream()), which is synchronised.
uint64_t tensor_checksum(const Tensor& t, cudaStream_t stream = nullptr);  // [any] any dtype

namespace comm_detail {
// The sums of mixed words alone (no length term).
uint64_t checksum_bytes_cpu(const void* data, size_t bytes);                        // data: [bytes]
uint64_t checksum_bytes_cuda(const void* data, size_t bytes, cudaStream_t stream);  // GPU [bytes]
}  // namespace comm_detail

}  // namespace nmt
