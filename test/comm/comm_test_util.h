// Helpers shared by the communication suites: deterministic test data, buffers on either device,
// and the multi-rank checks that run the same way over MPI (CPU) and NCCL (GPU).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "kernels/tensor.h"

namespace nmt::test {

// A value in [-1, 1) that depends only on (seed, index): every rank can compute any rank's data.
float test_value(uint64_t seed, int64_t index);

// An f32 (or other dtype) buffer on the CPU or the GPU, with host copies in and out.
class TestBuffer {
 public:
  TestBuffer(Device device, DType dtype, int64_t elements);
  ~TestBuffer();
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;

  const Tensor& view() const { return view_; }
  void upload(const void* host);  // host: view().bytes() bytes
  void download(void* host) const;
  std::vector<float> download_f32() const;  // f32 buffers only
  void upload_f32(const std::vector<float>& host);

 private:
  Tensor view_;
};

// Parameter-like ranges that tile [0, total): `count` ranges of sizes in [1, max_size].
std::vector<ElementRange> random_params(uint64_t seed, int count, int64_t max_size);
int64_t total_of(const std::vector<ElementRange>& params);

// The multi-rank checks (every rank calls them; `device` picks where the buffers live).
void check_sum_odd_sizes(Communicator& comm, Device device);
void check_buckets_match_plain_sum(Communicator& comm, Device device);
void check_broadcast(Communicator& comm, Device device);
void check_verify_identical(Communicator& comm, Device device);

}  // namespace nmt::test
