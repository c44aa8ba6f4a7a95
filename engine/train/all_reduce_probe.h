// The all-reduce bandwidth probe the trainer runs once at start-up under mpirun: a buffer of a
// given size summed over the ranks a few times, so the run card can compare the bandwidth the
// gradient exchange reached during training with what the links give to one large all-reduce.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "comm/communicator.h"
#include "kernels/tensor.h"

namespace nmt {

struct AllReduceProbe {
  std::string backend;  // the communicator's name: "mpi" or "nccl"
  int ranks = 1;
  uint64_t bytes = 0;  // the buffer's size (f32 elements)
  int iterations = 0;  // timed all-reduces, after one untimed warm-up
  double median_seconds = 0;
  double algbw_gb_per_s = 0;  // bytes / median_seconds / 1e9
  double busbw_gb_per_s =
      0;  // algbw * 2(n-1)/n: what each link carried (nccl-tests' bus bandwidth)
};

// Sums a zero buffer of `bytes` (rounded down to whole f32) over comm's ranks `iterations` times,
// on `device` (a GPU buffer for nccl, host memory for mpi). Collective: every rank calls it. Each
// all-reduce is timed by its request (GPU events for nccl, host clock for mpi).
AllReduceProbe probe_all_reduce(Communicator& comm, Device device, uint64_t bytes,
                                int iterations = 5);

nlohmann::json to_json(const AllReduceProbe& probe);

}  // namespace nmt
