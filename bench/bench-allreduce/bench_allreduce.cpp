// bench-allreduce: in-place sum all-reduce over message sizes (time, algbw, busbw as nccl-tests
// defines them) through the Communicator, then the bucketed gradient exchange (bench_buckets.cpp).
// Usage: mpirun -np 2 -x NCCL_NVLS_ENABLE=0 bench-allreduce [--backend nccl|mpi] [--help]
#include "bench/bench-allreduce/bench_allreduce.h"

#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/check.h"
#include "kernels/cuda/check.h"

namespace nmt::bench {

BenchBuffer::BenchBuffer(Device device, size_t bytes) : device_(device) {
  bytes = std::max<size_t>(bytes, 256);
  if (device == Device::cuda) {
    CUDA_CHECK(cudaMalloc(&data_, bytes));
    CUDA_CHECK(cudaMemset(data_, 0, bytes));
  } else {
    data_ = ::operator new (bytes, std::align_val_t{256});
    std::memset(data_, 0, bytes);  // zeros stay zeros: no denormals or infinities on the CPU
  }
}

BenchBuffer::~BenchBuffer() {
  if (device_ == Device::cuda) {
    cudaFree(data_);
  } else {
    ::operator delete (data_, std::align_val_t{256});
  }
}

double slowest(Communicator& comm, double seconds) {
  return comm.all_reduce_host({seconds}, HostReduce::max)[0];
}

double bus_factor(int ranks) {
  return ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;
}

Device device_of(const Communicator& comm) {
  return std::string(comm.name()) == "nccl" ? Device::cuda : Device::cpu;
}

namespace {

using Clock = std::chrono::steady_clock;

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  throw CommError("unknown --dtypes entry \"" + name + "\": expected f32, bf16 or f16");
}

// Average seconds of one all-reduce of `buffer`. NCCL ops are queued back to back on the
// communication stream (as nccl-tests does); MPI ones run one after another, because concurrent
// collectives may not share a buffer.
double time_all_reduce(Communicator& comm, const Tensor& buffer, int iters, int warmup) {
  auto run = [&](int count) {
    if (device_of(comm) == Device::cuda) {
      std::vector<std::unique_ptr<CommRequest>> requests;
      for (int i = 0; i < count; ++i)
        requests.push_back(comm.start_all_reduce_sum(buffer, "bench"));
      for (auto& r : requests) r->wait();
    } else {
      for (int i = 0; i < count; ++i) comm.all_reduce_sum(buffer, "bench");
    }
  };
  run(warmup);
  comm.barrier();
  const Clock::time_point start = Clock::now();
  run(iters);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  return slowest(comm, seconds);
}

void run_sweep(Communicator& comm, const BenchOptions& o) {
  const Device device = device_of(comm);
  BenchBuffer buffer(device, static_cast<size_t>(o.max_bytes));
  const bool root = comm.rank() == 0;
  if (root) {
    std::printf("# all-reduce sum, in place, %s backend, %d ranks (busbw = algbw * 2(n-1)/n)\n",
                comm.name(), comm.size());
    std::printf("# %12s %12s %5s %6s %12s %10s %10s\n", "bytes", "elements", "dtype", "iters",
                "time_us", "algbw_GB/s", "busbw_GB/s");
  }
  for (const std::string& dtype_text : o.dtypes) {
    const DType dtype = parse_dtype(dtype_text);
    if (device == Device::cpu && dtype != DType::f32) {
      if (root) {
        std::printf("# %s skipped: the %s backend sums f32 only on the CPU\n", dtype_text.c_str(),
                    comm.name());
      }
      continue;
    }
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      const int64_t elements = bytes / static_cast<int64_t>(dtype_size(dtype));
      if (elements == 0) continue;
      const int iters =
          o.iters > 0 ? o.iters
                      : static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 5, 50));
      const double seconds = time_all_reduce(comm, buffer.view(dtype, elements), iters, o.warmup);
      const double algbw = static_cast<double>(elements * dtype_size(dtype)) / seconds / 1e9;
      if (root) {
        std::printf("  %12lld %12lld %5s %6d %12.2f %10.2f %10.2f\n", static_cast<long long>(bytes),
                    static_cast<long long>(elements), dtype_text.c_str(), iters, seconds * 1e6,
                    algbw, algbw * bus_factor(comm.size()));
        std::fflush(stdout);
      }
    }
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace nmt::bench

int main(int argc, char** argv) {
  nmt::RankInfo ranks = nmt::init_ranks(&argc, &argv);
  nmt::bench::BenchOptions o;
  std::string dtypes = "f32,bf16", models = "base,big", buckets_mb = "1,4,16,25,64";
  CLI::App app{"bench-allreduce: all-reduce and bucketed gradient exchange timings"};
  app.add_option("--backend", o.backend,
                 "nccl | mpi | single (default: nccl with a GPU, else mpi)");
  app.add_option("--min-bytes", o.min_bytes, "smallest message (8)");
  app.add_option("--max-bytes", o.max_bytes, "largest message (1 GiB nccl, 64 MiB mpi)");
  app.add_option("--factor", o.factor, "size step, 2 or 4 (2)");
  app.add_option("--dtypes", dtypes, "comma list of f32, bf16, f16 (f32,bf16)");
  app.add_option("--iters", o.iters, "timed iterations per size (0: 5..50 by size)");
  app.add_option("--warmup", o.warmup, "untimed iterations per size (3)");
  app.add_option("--models", models, "bucketed exchange: comma list of base, big (base,big)");
  app.add_option("--bucket-mb", buckets_mb, "bucket sizes in MiB (1,4,16,25,64)");
  app.add_option("--exchange-iters", o.exchange_iters,
                 "timed exchanges per setting (10 nccl, 3 mpi)");
  app.add_flag("!--no-sweep", o.sweep, "skip the size sweep");
  app.add_flag("!--no-buckets", o.buckets, "skip the bucketed exchange");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    nmt::finalize_ranks();
    return code;
  }
  try {
    o.dtypes = nmt::bench::split_list(dtypes);
    o.models = nmt::bench::split_list(models);
    o.bucket_mb.clear();
    for (const std::string& mb : nmt::bench::split_list(buckets_mb))
      o.bucket_mb.push_back(std::stod(mb));
    if (o.backend.empty()) {
      int devices = 0;
      o.backend = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0 ? "nccl" : "mpi";
    }
    if (o.factor != 2 && o.factor != 4) throw nmt::CommError("--factor must be 2 or 4");
    if (o.max_bytes == 0)
      o.max_bytes = o.backend == "nccl" ? (int64_t{1} << 30) : (int64_t{64} << 20);
    if (o.exchange_iters == 0) o.exchange_iters = o.backend == "nccl" ? 10 : 3;
    if (o.min_bytes < 1 || o.max_bytes < o.min_bytes)
      throw nmt::CommError("bad --min-bytes/--max-bytes");
    auto comm = nmt::make_communicator(o.backend, ranks, nmt::CommOptions{300});
    if (o.sweep) nmt::bench::run_sweep(*comm, o);
    if (o.buckets) nmt::bench::run_bucketed_exchange(*comm, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-allreduce: %s\n", e.what());
    if (ranks.world_size > 1) nmt::abort_job(ranks, e.what());
    nmt::finalize_ranks();
    return 1;
  }
  nmt::finalize_ranks();
  return 0;
}
