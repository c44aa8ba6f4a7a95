// CPU suite of the communication layer: bucket layout, ready-marking rules and statistics over
// the single-process communicator, the factory, and the tensor checksum.
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/check.h"
#include "comm/checksum.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "test/comm/comm_test_util.h"
#include "test/support/catch.h"

namespace nmt {
namespace {

using test::random_params;
using test::total_of;

void require_tiles(const std::vector<ElementRange>& buckets, int64_t total) {
  int64_t at = 0;
  for (const ElementRange& b : buckets) {
    REQUIRE(b.begin == at);
    REQUIRE(b.size() > 0);
    at = b.end;
  }
  REQUIRE(at == total);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no CommError)";
}

TEST_CASE("plan_buckets without parameters cuts by size from the front", "[comm][buckets]") {
  // 1000 bytes hold 250 f32; rounded down to a multiple of 64 elements: 192.
  std::vector<ElementRange> b = plan_buckets(1000, 4, 1000);
  require_tiles(b, 1000);
  REQUIRE(b.size() == 6);
  for (size_t i = 0; i + 1 < b.size(); ++i) REQUIRE(b[i].size() == 192);
  REQUIRE(b.back().size() == 1000 - 5 * 192);

  REQUIRE(plan_buckets(1000, 4, size_t{1} << 30).size() == 1);
  REQUIRE(plan_buckets(0, 4, 1000).empty());
  // Smaller than one element: a bucket per element.
  REQUIRE(plan_buckets(5, 4, 1).size() == 5);
  // Under 64 elements per bucket, no rounding.
  REQUIRE(plan_buckets(100, 4, 40)[0].size() == 10);
}

TEST_CASE("plan_buckets keeps parameters whole and splits only oversized ones", "[comm][buckets]") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<ElementRange> params = random_params(seed, 30, 3000);
    const int64_t total = total_of(params);
    for (size_t bucket_bytes : {size_t{256}, size_t{4096}, size_t{20000}, size_t{1} << 20}) {
      INFO("seed " << seed << " bucket bytes " << bucket_bytes);
      std::vector<ElementRange> shuffled = params;
      std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(seed));
      std::vector<ElementRange> b = plan_buckets(total, 4, bucket_bytes, shuffled);
      require_tiles(b, total);
      for (const ElementRange& bucket : b)
        REQUIRE(bucket.size() * 4 <= static_cast<int64_t>(bucket_bytes));
      const int64_t capacity = static_cast<int64_t>(bucket_bytes / 4) / 64 * 64;
      for (const ElementRange& p : params) {
        if (p.size() > capacity) continue;
        // A parameter that fits in a bucket lies in exactly one bucket.
        int holders = 0;
        for (const ElementRange& bucket : b) {
          if (bucket.begin < p.end && p.begin < bucket.end) ++holders;
        }
        REQUIRE(holders == 1);
      }
    }
  }
  // Equal parameters the size of a bucket: one bucket each.
  std::vector<ElementRange> equal;
  for (int i = 0; i < 10; ++i) equal.push_back({i * 640, (i + 1) * 640});
  REQUIRE(plan_buckets(6400, 4, 640 * 4, equal).size() == 10);
  // One huge bucket takes them all.
  REQUIRE(plan_buckets(6400, 4, size_t{1} << 30, equal).size() == 1);
}

TEST_CASE("plan_buckets rejects parameter ranges that do not tile the buffer", "[comm][buckets]") {
  REQUIRE(error_of([] {
            plan_buckets(100, 4, 64, {{0, 40}, {50, 100}});
          }).find("gap at element 40") != std::string::npos);
  REQUIRE(error_of([] {
            plan_buckets(100, 4, 64, {{0, 60}, {50, 100}});
          }).find("overlap") != std::string::npos);
  REQUIRE(error_of([] {
            plan_buckets(100, 4, 64, {{0, 60}});
          }).find("end at element 60") != std::string::npos);
}

struct SingleFixture {
  std::unique_ptr<Communicator> comm = make_communicator("single", RankInfo{});
};

TEST_CASE("the single-process communicator leaves every buffer as it is", "[comm][single]") {
  SingleFixture f;
  Communicator& comm = *f.comm;
  REQUIRE(std::string(comm.name()) == "single");
  REQUIRE(comm.rank() == 0);
  REQUIRE(comm.size() == 1);
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  Tensor t(data.data(), DType::f32, Device::cpu, {3});
  comm.all_reduce_sum(t);
  REQUIRE(data == std::vector<float>{1.5f, -2.0f, 3.25f});
  auto request = comm.start_all_reduce_sum(t, "test");
  REQUIRE(request->test());
  request->wait();
  comm.broadcast(t, 0);
  REQUIRE(data[2] == 3.25f);
  REQUIRE_THROWS_AS(comm.broadcast(t, 1), CommError);
  REQUIRE(comm.all_reduce_host({1.0, 2.5}) == std::vector<double>{1.0, 2.5});
  REQUIRE(comm.all_reduce_host({4.0}, HostReduce::max) == std::vector<double>{4.0});
  REQUIRE(comm.all_reduce_host({}).empty());
  comm.barrier();
  REQUIRE_NOTHROW(comm.verify_identical(t, 3));
  REQUIRE_THROWS_AS(comm.set_timeout_seconds(0), CommError);
  comm.set_timeout_seconds(2.5);
  REQUIRE(comm.timeout_seconds() == 2.5);
}

TEST_CASE("make_communicator names what it cannot build", "[comm][factory]") {
  REQUIRE(error_of([] {
            make_communicator("gloo", RankInfo{});
          }).find("unknown communicator \"gloo\"") != std::string::npos);
  RankInfo two{0, 2, 0, 2};
  REQUIRE(error_of([&] { make_communicator("single", two); }).find("cannot serve 2 ranks") !=
          std::string::npos);
  REQUIRE(error_of([] {
            make_communicator("single", RankInfo{}, CommOptions{-1});
          }).find("timeout") != std::string::npos);
}

TEST_CASE("GradBuckets marks in any order, once each, and reports the step", "[comm][buckets]") {
  SingleFixture f;
  std::vector<ElementRange> params = random_params(7, 25, 400);
  const int64_t n = total_of(params);
  std::vector<float> grads(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) grads[i] = static_cast<float>(i);
  Tensor view(grads.data(), DType::f32, Device::cpu, {n});
  GradBuckets buckets(*f.comm, view, 1024, params);
  REQUIRE(buckets.bucket_bytes() == 1024);
  REQUIRE(buckets.bucket_of(0) == 0);
  REQUIRE(buckets.bucket_of(n - 1) == static_cast<int>(buckets.buckets().size()) - 1);
  REQUIRE_THROWS_AS(buckets.bucket_of(n), CommError);

  std::vector<ElementRange> order = params;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
  for (const ElementRange& p : order) buckets.mark_ready(p.begin, p.size());
  buckets.finish();
  for (int64_t i = 0; i < n; ++i) REQUIRE(grads[i] == static_cast<float>(i));
  const GradExchangeStats& s = buckets.stats();
  REQUIRE(s.bytes == n * 4);
  REQUIRE(s.buckets == static_cast<int>(buckets.buckets().size()));
  REQUIRE(s.collectives == s.buckets);  // one collective per bucket
  REQUIRE(s.busbw_gbps == 0);  // one rank moves nothing over a bus

  SECTION("a range marked twice is an error naming both ranges") {
    buckets.mark_ready(params[3].begin, params[3].size());
    std::string message = error_of([&] { buckets.mark_ready(params[3].begin + 1, 1); });
    REQUIRE(message.find("already marked ready") != std::string::npos);
    const std::string first_marked = std::to_string(params[3].begin) + ", ";
    REQUIRE(message.find(first_marked) != std::string::npos);
  }
  SECTION("a range outside the buffer is an error") {
    REQUIRE(error_of([&] { buckets.mark_ready(n - 1, 2); }).find("outside the gradient buffer") !=
            std::string::npos);
    REQUIRE_THROWS_AS(buckets.mark_ready(-1, 1), CommError);
  }
  SECTION("finish() names the first bucket and element never marked") {
    for (const ElementRange& p : params) {
      if (p.begin != params[5].begin) buckets.mark_ready(p.begin, p.size());
    }
    const int bucket = buckets.bucket_of(params[5].begin);
    std::string message = error_of([&] { buckets.finish(); });
    REQUIRE(message.find("bucket " + std::to_string(bucket) + " ") != std::string::npos);
    REQUIRE(message.find("the first " + std::to_string(params[5].begin)) != std::string::npos);
    buckets.mark_ready(params[5].begin, params[5].size());
    REQUIRE_NOTHROW(buckets.finish());
  }
  SECTION("mark_all_ready fills whatever is left; reset drops the marks of a step") {
    buckets.mark_ready(params[2].begin, params[2].size());
    buckets.mark_ready(params[9].begin, params[9].size());
    buckets.mark_all_ready();
    REQUIRE_NOTHROW(buckets.finish());
    buckets.mark_ready(params[2].begin, params[2].size());
    buckets.reset();
    buckets.mark_ready(params[2].begin, params[2].size());  // not "twice": the step was reset
    buckets.mark_all_ready();
    REQUIRE_NOTHROW(buckets.finish());
  }
}

TEST_CASE("GradBuckets without parameter ranges covers the buffer by size", "[comm][buckets]") {
  SingleFixture f;
  std::vector<float> grads(10000, 1.0f);
  GradBuckets buckets(*f.comm, Tensor(grads.data(), DType::f32, Device::cpu, {100, 100}), 4096);
  REQUIRE(buckets.buckets().size() == 10);  // 1024 f32 per bucket
  REQUIRE(buckets.buckets().back().end == 10000);
  buckets.mark_all_ready();
  buckets.finish();
  REQUIRE(buckets.stats().bytes == 40000);
}

TEST_CASE("GradBuckets::leading_buckets_filled counts the buckets ranges fill from the front",
          "[comm][buckets]") {
  SingleFixture f;
  std::vector<float> grads(3000, 1.0f);
  // Parameters [0, 600) [600, 1000) [1000, 1500) [1500, 3000); 960 f32 a bucket (a multiple of
  // 64): buckets [0, 600) [600, 1500) [1500, 2460) [2460, 3000).
  const std::vector<ElementRange> params = {{0, 600}, {600, 1000}, {1000, 1500}, {1500, 3000}};
  GradBuckets buckets(*f.comm, Tensor(grads.data(), DType::f32, Device::cpu, {3000}), 4000, params);
  REQUIRE(buckets.buckets().size() == 4);
  REQUIRE(buckets.buckets()[1].begin == 600);
  REQUIRE(buckets.buckets()[1].end == 1500);
  CHECK(buckets.leading_buckets_filled({}) == 0);
  CHECK(buckets.leading_buckets_filled({{600, 1000}}) == 0);
  CHECK(buckets.leading_buckets_filled({{0, 600}}) == 1);
  CHECK(buckets.leading_buckets_filled({{0, 600}, {600, 1000}}) == 1);      // half of the second
  CHECK(buckets.leading_buckets_filled({{600, 1000}, {1000, 1500}}) == 0);  // not the first
  CHECK(buckets.leading_buckets_filled({{600, 1000}, {1000, 1500}, {0, 600}}) == 2);
  CHECK(buckets.leading_buckets_filled({{0, 1500}, {2460, 3000}}) == 2);
  CHECK(buckets.leading_buckets_filled(params) == 4);
  // The same answers whatever this step has marked (a capture asks without marking).
  buckets.mark_ready(0, 600);
  buckets.mark_ready(600, 400);
  CHECK(buckets.leading_buckets_filled({{600, 1000}}) == 0);
  CHECK(buckets.leading_buckets_filled({{0, 600}, {600, 1000}, {1000, 1500}}) == 2);
  buckets.mark_all_ready();
  buckets.finish();
}

TEST_CASE("tensor_checksum sees every bit and every position", "[comm][checksum]") {
  std::vector<float> data(1001);
  for (size_t i = 0; i < data.size(); ++i) data[i] = test::test_value(1, static_cast<int64_t>(i));
  Tensor t(data.data(), DType::f32, Device::cpu, {1001});
  const uint64_t base = tensor_checksum(t);
  REQUIRE(base == tensor_checksum(t));
  REQUIRE(tensor_checksum(Tensor(data.data(), DType::f32, Device::cpu, {0})) ==
          tensor_checksum(Tensor(nullptr, DType::f32, Device::cpu, {0})));

  std::vector<float> flipped = data;
  uint32_t bits;
  std::memcpy(&bits, &flipped[700], 4);
  bits ^= 1u;  // the lowest mantissa bit
  std::memcpy(&flipped[700], &bits, 4);
  REQUIRE(tensor_checksum(Tensor(flipped.data(), DType::f32, Device::cpu, {1001})) != base);

  std::vector<float> swapped = data;
  std::swap(swapped[10], swapped[11]);
  REQUIRE(tensor_checksum(Tensor(swapped.data(), DType::f32, Device::cpu, {1001})) != base);

  // 3 bf16 = 6 bytes: the last word is zero-padded; the length keeps a trailing zero bf16 apart
  // from the padding, and bytes past the view do not count.
  std::vector<uint16_t> half = {0x3f80, 0x4000, 0x4040, 0x0000};
  uint64_t three = tensor_checksum(Tensor(half.data(), DType::bf16, Device::cpu, {3}));
  REQUIRE(three != tensor_checksum(Tensor(half.data(), DType::bf16, Device::cpu, {4})));
  half[3] = 1;
  REQUIRE(tensor_checksum(Tensor(half.data(), DType::bf16, Device::cpu, {3})) == three);

  // An unaligned view hashes like the same bytes copied to an aligned buffer.
  std::vector<unsigned char> bytes(64);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 13);
  std::vector<unsigned char> copy(bytes.begin() + 2, bytes.begin() + 2 + 22);
  REQUIRE(comm_detail::checksum_bytes_cpu(bytes.data() + 2, 22) ==
          comm_detail::checksum_bytes_cpu(copy.data(), 22));
}

}  // namespace
}  // namespace nmt
