// A two-rank program for the failure tests: after one good bucketed exchange, rank 1 stops taking
// part (--mode stuck: sleeps; --mode dead: killed by SIGKILL) while rank 0 all-reduces again. Rank
// 0 must then end the job with a non-zero exit and a message naming the rank and the operation
// within the timeout, never hang. Exits 77 ("skipped") for --backend nccl without 2 GPUs.
// Usage: mpiexec -n 2 comm_failure_probe --backend mpi|nccl --mode stuck|dead --timeout SECONDS
#include <cuda_runtime.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"

namespace {

struct Options {
  std::string backend = "mpi";
  std::string mode = "stuck";
  double timeout = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--backend") {
      o.backend = value;
    } else if (key == "--mode") {
      o.mode = value;
    } else if (key == "--timeout") {
      o.timeout = std::stod(value);
    } else {
      throw std::invalid_argument("unknown option " + key);
    }
  }
  return o;
}

int run(const Options& o, const nmt::RankInfo& ranks) {
  auto comm = nmt::make_communicator(o.backend, ranks, nmt::CommOptions{o.timeout});
  const int64_t n = 100000;
  void* data = nullptr;
  std::vector<float> host(n, 1.0f);
  const nmt::Device device = o.backend == "nccl" ? nmt::Device::cuda : nmt::Device::cpu;
  if (device == nmt::Device::cuda) {
    if (cudaMalloc(&data, n * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
    cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  } else {
    data = host.data();
  }
  nmt::GradBuckets buckets(*comm, nmt::Tensor(data, nmt::DType::f32, device, {n}));
  buckets.mark_all_ready();
  buckets.finish();  // one good exchange: setup works on both ranks
  std::printf("rank %d: first exchange done\n", ranks.world_rank);
  std::fflush(stdout);

  if (ranks.world_rank == 1) {
    if (o.mode == "dead") std::raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::hours(1));  // stuck: never joins again
  }
  buckets.mark_all_ready();
  try {
    buckets.finish();
  } catch (const std::exception& e) {
    comm->abort(e.what());  // nccl reports by exception; take the job down with its message
  }
  std::printf("rank %d: the second exchange completed without its peer\n", ranks.world_rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  nmt::RankInfo ranks = nmt::init_ranks(&argc, &argv);
  try {
    Options o = parse(argc, argv);
    if (o.backend == "nccl") {
      int devices = 0;
      if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < ranks.local_size) {
        if (ranks.world_rank == 0) std::printf("SKIPPED: the nccl failure test needs 2 GPUs\n");
        nmt::finalize_ranks();
        return 77;
      }
    }
    int rc = run(o, ranks);
    nmt::finalize_ranks();
    return rc;
  } catch (const std::exception& e) {
    nmt::abort_job(ranks, e.what());
  }
}
