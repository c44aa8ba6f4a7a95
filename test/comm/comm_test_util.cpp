// Shared helpers and multi-rank checks of the communication suites (see comm_test_util.h).
#include "test/comm/comm_test_util.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>
#include <random>
#include <string>

#include "comm/check.h"
#include "comm/checksum_mix.h"
#include "kernels/cuda/check.h"
#include "test/support/catch.h"

namespace nmt::test {

float test_value(uint64_t seed, int64_t index) {
  uint64_t bits =
      comm_detail::checksum_mix(static_cast<uint32_t>(seed), static_cast<uint64_t>(index));
  return static_cast<float>(static_cast<double>(bits >> 40) / double(1 << 23) - 1.0);
}

TestBuffer::TestBuffer(Device device, DType dtype, int64_t elements)
    : view_(nullptr, dtype, device, {elements}) {
  size_t bytes = std::max<size_t>(view_.bytes(), 4);
  if (device == Device::cuda) {
    CUDA_CHECK(cudaMalloc(&view_.data, bytes));
  } else {
    view_.data = ::operator new (bytes, std::align_val_t{256});
  }
}

TestBuffer::~TestBuffer() {
  if (view_.device == Device::cuda) {
    cudaFree(view_.data);
  } else {
    ::operator delete (view_.data, std::align_val_t{256});
  }
}

void TestBuffer::upload(const void* host) {
  if (view_.device == Device::cuda) {
    CUDA_CHECK(cudaMemcpy(view_.data, host, view_.bytes(), cudaMemcpyHostToDevice));
  } else {
    std::memcpy(view_.data, host, view_.bytes());
  }
}

void TestBuffer::download(void* host) const {
  if (view_.device == Device::cuda) {
    CUDA_CHECK(cudaMemcpy(host, view_.data, view_.bytes(), cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(host, view_.data, view_.bytes());
  }
}

std::vector<float> TestBuffer::download_f32() const {
  std::vector<float> host(static_cast<size_t>(view_.numel()));
  download(host.data());
  return host;
}

void TestBuffer::upload_f32(const std::vector<float>& host) {
  REQUIRE(static_cast<int64_t>(host.size()) == view_.numel());
  upload(host.data());
}

std::vector<ElementRange> random_params(uint64_t seed, int count, int64_t max_size) {
  std::mt19937_64 rng(seed);
  std::vector<ElementRange> params;
  int64_t at = 0;
  for (int i = 0; i < count; ++i) {
    int64_t size = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_size));
    params.push_back({at, at + size});
    at += size;
  }
  return params;
}

int64_t total_of(const std::vector<ElementRange>& params) {
  return params.empty() ? 0 : params.back().end;
}

namespace {

std::vector<float> rank_data(uint64_t seed, int rank, int64_t n) {
  std::vector<float> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[i] = test_value(seed * 1000 + rank, i);
  return data;
}

// The sum over ranks in rank order. With two ranks a + b is exactly what any reduction computes.
std::vector<float> expected_sum(uint64_t seed, int ranks, int64_t n) {
  std::vector<float> sum(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    std::vector<float> data = rank_data(seed, r, n);
    for (int64_t i = 0; i < n; ++i) sum[i] += data[i];
  }
  return sum;
}

int64_t count_mismatches(const std::vector<float>& got, const std::vector<float>& want, int ranks) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool same = ranks <= 2 ? std::memcmp(&got[i], &want[i], 4) == 0
                           : std::fabs(got[i] - want[i]) <= 1e-5f * ranks;
    bad += same ? 0 : 1;
  }
  return bad;
}

// Marks every parameter once, in an order (and with splits) that differs from rank to rank, with
// a host reduction halfway, as a trainer might sum token counts while backward runs.
void mark_shuffled(Communicator& comm, GradBuckets& buckets, std::vector<ElementRange> params,
                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(params.begin(), params.end(), rng);
  for (size_t i = 0; i < params.size(); ++i) {
    const ElementRange& p = params[i];
    if (i == params.size() / 2) REQUIRE(comm.all_reduce_host({1.0})[0] == comm.size());
    if (p.size() > 1 && rng() % 3 == 0) {
      int64_t cut = p.begin + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.size() - 1));
      buckets.mark_ready(cut, p.end - cut);
      buckets.mark_ready(p.begin, cut - p.begin);
    } else {
      buckets.mark_ready(p.begin, p.size());
    }
  }
}

}  // namespace

void check_sum_odd_sizes(Communicator& comm, Device device) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
    INFO("elements " << n);
    TestBuffer buffer(device, DType::f32, n);
    buffer.upload_f32(rank_data(3, comm.rank(), n));
    comm.all_reduce_sum(buffer.view());
    std::vector<float> got = buffer.download_f32();
    REQUIRE(count_mismatches(got, expected_sum(3, comm.size(), n), comm.size()) == 0);
    // The same bits on every rank, whatever the backend's reduction order.
    REQUIRE_NOTHROW(comm.verify_identical(buffer.view(), 0));
  }
}

void check_buckets_match_plain_sum(Communicator& comm, Device device) {
  struct Layout {
    std::vector<ElementRange> params;
    size_t bucket_bytes;
    int expected_buckets;  // 0: not checked
  };
  std::vector<ElementRange> mixed = random_params(11, 40, 5000);
  std::vector<ElementRange> equal;
  for (int i = 0; i < 24; ++i) equal.push_back({i * 640, (i + 1) * 640});
  std::vector<Layout> layouts = {
      {mixed, size_t{1} << 30, 1},  // one bucket
      {mixed, 64 * 1024, 0},       {mixed, 16 * 1024, 0},
      {mixed, 4 * 1024, 0},        {equal, 640 * 4, 24},  // a bucket per parameter
  };
  for (const Layout& layout : layouts) {
    const int64_t n = total_of(layout.params);
    INFO("bucket bytes " << layout.bucket_bytes << ", elements " << n);
    TestBuffer plain(device, DType::f32, n), grads(device, DType::f32, n);
    GradBuckets buckets(comm, grads.view(), layout.bucket_bytes, layout.params);
    if (layout.expected_buckets > 0) {
      REQUIRE(static_cast<int>(buckets.buckets().size()) == layout.expected_buckets);
    }
    for (int step = 0; step < 2; ++step) {  // the second step checks that finish() re-arms
      std::vector<float> local = rank_data(20 + step, comm.rank(), n);
      plain.upload_f32(local);
      grads.upload_f32(local);
      comm.all_reduce_sum(plain.view());
      buckets.reset();
      mark_shuffled(comm, buckets, layout.params, 1000 * step + comm.rank());
      buckets.finish();
      REQUIRE(count_mismatches(grads.download_f32(), plain.download_f32(), comm.size()) == 0);
      const GradExchangeStats& s = buckets.stats();
      REQUIRE(s.bytes == n * 4);
      REQUIRE(s.buckets == static_cast<int>(buckets.buckets().size()));
      REQUIRE(s.collectives == s.buckets);  // one collective per bucket
      REQUIRE(s.comm_seconds >= 0);
      REQUIRE(s.exposed_seconds >= 0);
    }
  }
}

void check_broadcast(Communicator& comm, Device device) {
  for (int root : {0, comm.size() - 1}) {
    INFO("root " << root);
    const int64_t n = 1001;
    TestBuffer buffer(device, DType::f32, n);
    buffer.upload_f32(rank_data(5, comm.rank(), n));
    comm.broadcast(buffer.view(), root);
    std::vector<float> want = rank_data(5, root, n);
    REQUIRE(count_mismatches(buffer.download_f32(), want, 1) == 0);

    // Any dtype travels as bytes: 7 i32 and 5 bf16 (10 bytes, not a multiple of 4).
    for (DType dtype : {DType::i32, DType::bf16}) {
      const int64_t count = dtype == DType::i32 ? 7 : 5;
      TestBuffer small(device, dtype, count);
      std::vector<unsigned char> mine(small.view().bytes()), got(small.view().bytes());
      for (size_t i = 0; i < mine.size(); ++i)
        mine[i] = static_cast<unsigned char>(i * 7 + 1 + comm.rank());
      small.upload(mine.data());
      comm.broadcast(small.view(), root);
      small.download(got.data());
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(got[i] == static_cast<unsigned char>(i * 7 + 1 + root));
      }
    }
  }
  TestBuffer buffer(device, DType::f32, 3);
  REQUIRE_THROWS_AS(comm.broadcast(buffer.view(), comm.size()), CommError);
}

void check_verify_identical(Communicator& comm, Device device) {
  const int64_t n = 4097;
  TestBuffer params(device, DType::f32, n);
  std::vector<float> values = rank_data(8, 0, n);
  params.upload_f32(values);
  REQUIRE_NOTHROW(comm.verify_identical(params.view(), 41));

  // One element differs on the last rank: every rank must throw, naming the step.
  if (comm.rank() == comm.size() - 1) values[500] = std::nextafter(values[500], 2.0f);
  params.upload_f32(values);
  double threw = 0;
  std::string message;
  try {
    comm.verify_identical(params.view(), 42);
  } catch (const CommError& e) {
    threw = 1;
    message = e.what();
  }
  std::vector<double> throwers = comm.all_reduce_host({threw});
  if (comm.size() > 1) {
    REQUIRE(threw == 1);
    REQUIRE(throwers[0] == comm.size());
    REQUIRE(message.find("parameters diverged across ranks at step 42") != std::string::npos);
    REQUIRE(message.find("rank " + std::to_string(comm.size() - 1) + " checksum") !=
            std::string::npos);
  } else {
    REQUIRE(threw == 0);
  }
}

}  // namespace nmt::test
