// MPI + NCCL suite for two or more GPUs (ctest runs it under mpiexec -n 2; its main,
// main_nccl_mpi.cpp, exits 77 = "skipped" when a node has fewer GPUs than ranks): the nccl
// communicator across processes — exact and identical sums, bucketed sums in per-rank marking
// orders, broadcast, the divergence check.
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "test/comm/comm_test_util.h"
#include "test/support/catch.h"

namespace nmt {
namespace {

std::unique_ptr<Communicator> nccl_comm() {
  static const RankInfo ranks = init_ranks();
  return make_communicator("nccl", ranks, CommOptions{30});
}

TEST_CASE("nccl across ranks sums odd sizes to the same bits everywhere", "[comm][nccl][mpi]") {
  auto comm = nccl_comm();
  test::check_sum_odd_sizes(*comm, Device::cuda);
}

TEST_CASE("nccl across ranks: buckets equal a plain all-reduce in any marking order",
          "[comm][nccl][mpi]") {
  auto comm = nccl_comm();
  test::check_buckets_match_plain_sum(*comm, Device::cuda);
}

TEST_CASE("nccl across ranks: broadcast and the divergence check", "[comm][nccl][mpi]") {
  auto comm = nccl_comm();
  test::check_broadcast(*comm, Device::cuda);
  test::check_verify_identical(*comm, Device::cuda);
  // CPU buffers go over MPI inside the nccl communicator.
  std::vector<float> one = {1.0f};
  comm->all_reduce_sum(Tensor(one.data(), DType::f32, Device::cpu, {1}));
  REQUIRE(one[0] == static_cast<float>(comm->size()));
}

}  // namespace
}  // namespace nmt
