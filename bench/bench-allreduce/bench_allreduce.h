// Shared pieces of bench-allreduce: options, a buffer on either device, and the timing helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/tensor.h"

namespace nmt::bench {

struct BenchOptions {
  std::string backend;  // nccl | mpi | single
  int64_t min_bytes = 8;
  int64_t max_bytes = 0;  // 0: 1 GiB (nccl), 64 MiB (mpi)
  int factor = 2;         // size step: 2 or 4
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int iters = 0;  // 0: by size
  int warmup = 3;
  std::vector<std::string> models = {"base", "big"};
  std::vector<double> bucket_mb = {1, 4, 16, 25, 64};
  int exchange_iters = 0;  // 0: 10 (nccl), 3 (mpi)
  bool sweep = true, buckets = true;
};

// Zero-filled memory on the CPU or the GPU, freed at scope exit.
class BenchBuffer {
 public:
  BenchBuffer(Device device, size_t bytes);
  ~BenchBuffer();
  BenchBuffer(const BenchBuffer&) = delete;
  BenchBuffer& operator=(const BenchBuffer&) = delete;
  Tensor view(DType dtype, int64_t elements) const {
    return Tensor(data_, dtype, device_, {elements});
  }

 private:
  Device device_;
  void* data_ = nullptr;
};

// Seconds of the slowest rank for `seconds` measured on each.
double slowest(Communicator& comm, double seconds);
// nccl-tests' bus bandwidth factor for all-reduce: 2(n-1)/n.
double bus_factor(int ranks);
Device device_of(const Communicator& comm);

void run_bucketed_exchange(Communicator& comm, const BenchOptions& options);

}  // namespace nmt::bench
