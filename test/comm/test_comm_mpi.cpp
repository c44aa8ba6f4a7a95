// MPI suite (ctest runs it under mpiexec -n 2): the mpi communicator on CPU buffers — sums that
// are exact and bit-identical on every rank, bucketed sums equal to a plain sum whatever the
// marking order, broadcast, the divergence check, host reductions and bad-buffer errors.
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/check.h"
#include "comm/communicator.h"
#include "test/comm/comm_test_util.h"
#include "test/support/catch.h"

namespace nmt {
namespace {

std::unique_ptr<Communicator> mpi_comm() {
  static const RankInfo ranks = init_ranks();
  return make_communicator("mpi", ranks, CommOptions{20});
}

TEST_CASE("bootstrap reports world and node ranks", "[comm][mpi]") {
  RankInfo ranks = init_ranks();
  REQUIRE(ranks.world_size >= 1);
  REQUIRE(ranks.world_rank < ranks.world_size);
  REQUIRE(ranks.local_rank < ranks.local_size);
  REQUIRE(ranks.local_size <= ranks.world_size);
  auto comm = mpi_comm();
  REQUIRE(std::string(comm->name()) == "mpi");
  REQUIRE(comm->rank() == ranks.world_rank);
  REQUIRE(comm->size() == ranks.world_size);
}

TEST_CASE("mpi all-reduce sums odd sizes to the same bits on every rank", "[comm][mpi]") {
  auto comm = mpi_comm();
  test::check_sum_odd_sizes(*comm, Device::cpu);
}

TEST_CASE("mpi bucketed all-reduce equals a plain all-reduce in any marking order", "[comm][mpi]") {
  auto comm = mpi_comm();
  test::check_buckets_match_plain_sum(*comm, Device::cpu);
}

TEST_CASE("mpi broadcast copies the root's bytes", "[comm][mpi]") {
  auto comm = mpi_comm();
  test::check_broadcast(*comm, Device::cpu);
}

TEST_CASE("mpi verify_identical passes equal and rejects differing parameters on every rank",
          "[comm][mpi]") {
  auto comm = mpi_comm();
  test::check_verify_identical(*comm, Device::cpu);
}

TEST_CASE("mpi host all-reduce of doubles: sum, min, max", "[comm][mpi]") {
  auto comm = mpi_comm();
  const double r = comm->rank(), n = comm->size();
  std::vector<double> sum = comm->all_reduce_host({r + 1, 0.5, -r});
  REQUIRE(sum == std::vector<double>{n * (n + 1) / 2, 0.5 * n, -n * (n - 1) / 2});
  REQUIRE(comm->all_reduce_host({r, -r}, HostReduce::min) == std::vector<double>{0, -(n - 1)});
  REQUIRE(comm->all_reduce_host({r, -r}, HostReduce::max) == std::vector<double>{n - 1, 0});
  // Rank-order summation: 0.1 + 0.2 + ... gives the same bits everywhere.
  std::vector<double> odd = comm->all_reduce_host({0.1 * (r + 1)});
  std::vector<double> all = comm->all_reduce_host({odd[0], -odd[0]}, HostReduce::max);
  REQUIRE(all[0] == -all[1]);
  comm->barrier();
}

TEST_CASE("mpi rejects GPU and non-f32 buffers with a clear error", "[comm][mpi]") {
  auto comm = mpi_comm();
  std::vector<uint16_t> half(8);
  Tensor bf16(half.data(), DType::bf16, Device::cpu, {8});
  try {
    comm->all_reduce_sum(bf16);
    FAIL("expected CommError");
  } catch (const CommError& e) {
    REQUIRE(std::string(e.what()).find("f32 buffers only") != std::string::npos);
  }
  Tensor gpu(reinterpret_cast<void*>(0x1000), DType::f32, Device::cuda, {8});
  REQUIRE_THROWS_AS(comm->all_reduce_sum(gpu), CommError);
  REQUIRE_THROWS_AS(comm->broadcast(gpu, 0), CommError);
  // Nothing was started: the communicator still works on every rank.
  std::vector<float> one = {1.0f};
  comm->all_reduce_sum(Tensor(one.data(), DType::f32, Device::cpu, {1}));
  REQUIRE(one[0] == static_cast<float>(comm->size()));
}

}  // namespace
}  // namespace nmt
