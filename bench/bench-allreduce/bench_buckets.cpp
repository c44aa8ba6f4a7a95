// The bucketed gradient exchange of bench-allreduce: flat f32 gradient buffers laid out like
// Transformer-base and -big (backward order, shared embedding last), every parameter marked ready
// front to back as backward would, at several bucket sizes plus one bucket for the whole buffer.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench-allreduce/bench_allreduce.h"
#include "comm/check.h"
#include "comm/grad_buckets.h"

namespace nmt::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct ModelShape {
  std::string name;
  int64_t d_model, ffn, layers, vocab;
};

// Parameter sizes in the order backward finishes them: decoder layers from the last, encoder
// layers from the last, then the shared embedding (biases and norms included).
std::vector<ElementRange> transformer_layout(const ModelShape& m) {
  const int64_t d = m.d_model;
  std::vector<int64_t> sizes;
  auto norm = [&] { sizes.insert(sizes.end(), {d, d}); };
  auto linear = [&](int64_t in, int64_t out) { sizes.insert(sizes.end(), {out, out * in}); };
  auto attention = [&] {
    linear(d, d);  // output projection finishes first in backward
    for (int i = 0; i < 3; ++i) linear(d, d);
    norm();
  };
  auto feed_forward = [&] {
    linear(m.ffn, d);
    linear(d, m.ffn);
    norm();
  };
  norm();  // decoder final norm
  for (int64_t l = 0; l < m.layers; ++l) {
    feed_forward();
    attention();  // cross-attention
    attention();  // self-attention
  }
  norm();  // encoder final norm
  for (int64_t l = 0; l < m.layers; ++l) {
    feed_forward();
    attention();
  }
  sizes.push_back(m.vocab * d);
  std::vector<ElementRange> ranges;
  int64_t at = 0;
  for (int64_t size : sizes) {
    ranges.push_back({at, at + size});
    at += size;
  }
  return ranges;
}

}  // namespace

void run_bucketed_exchange(Communicator& comm, const BenchOptions& o) {
  const bool root = comm.rank() == 0;
  if (root) {
    std::printf(
        "# bucketed gradient exchange (f32 sum), %s backend, %d ranks; time per exchange "
        "of the slowest rank; comm_ms = sum of the bucket all-reduce times\n",
        comm.name(), comm.size());
    std::printf("# %5s %11s %9s %7s %7s %10s %10s %10s %10s\n", "model", "parameters", "bucket_MB",
                "buckets", "groups", "time_ms", "comm_ms", "algbw_GB/s", "busbw_GB/s");
  }
  for (const std::string& name : o.models) {
    ModelShape shape;
    if (name == "base") {
      shape = {"base", 512, 2048, 6, 32768};
    } else if (name == "big") {
      shape = {"big", 1024, 4096, 6, 32768};
    } else {
      throw CommError("unknown --models entry \"" + name + "\": expected base or big");
    }
    const std::vector<ElementRange> params = transformer_layout(shape);
    const int64_t total = params.back().end;
    BenchBuffer grads(device_of(comm), static_cast<size_t>(total) * 4);
    std::vector<double> bucket_mb = o.bucket_mb;
    bucket_mb.push_back(0);  // 0: one bucket for the whole buffer, the unbucketed reference
    for (double mb : bucket_mb) {
      const size_t bucket_bytes =
          mb > 0 ? static_cast<size_t>(mb * (1 << 20)) : static_cast<size_t>(total) * 4;
      GradBuckets buckets(comm, grads.view(DType::f32, total), bucket_bytes, params);
      auto exchange = [&] {
        for (const ElementRange& p : params) buckets.mark_ready(p.begin, p.size());
        buckets.finish();
      };
      exchange();  // warm-up: connections, event pool
      comm.barrier();
      double comm_seconds = 0;
      int groups = 0;
      const Clock::time_point start = Clock::now();
      for (int i = 0; i < o.exchange_iters; ++i) {
        exchange();
        comm_seconds += buckets.stats().comm_seconds;
        groups = buckets.stats().collectives;
      }
      const double seconds = slowest(
          comm, std::chrono::duration<double>(Clock::now() - start).count() / o.exchange_iters);
      const double algbw = static_cast<double>(total) * 4 / seconds / 1e9;
      if (root) {
        std::printf("  %5s %11lld %9.1f %7zu %7d %10.3f %10.3f %10.2f %10.2f\n", name.c_str(),
                    static_cast<long long>(total), static_cast<double>(bucket_bytes) / (1 << 20),
                    buckets.buckets().size(), groups, seconds * 1e3,
                    comm_seconds / o.exchange_iters * 1e3, algbw, algbw * bus_factor(comm.size()));
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace nmt::bench
