// CUDA suite (skipped without a GPU): a one-rank NCCL communicator runs every GPU code path —
// grouped all-reduce of f32/bf16/f16, buckets with CUDA-event timing, broadcast, CPU buffers
// routed to the host backend — and the GPU checksum matches the CPU one bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "comm/check.h"
#include "comm/checksum.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "comm/nccl_communicator.h"
#include "test/comm/comm_test_util.h"
#include "test/support/catch.h"

namespace nmt {
namespace {

std::unique_ptr<Communicator> nccl_comm() {
  return make_communicator("nccl", RankInfo{});
}

TEST_CASE("a one-rank nccl communicator sums GPU buffers of every float dtype", "[comm][nccl]") {
  auto comm = nccl_comm();
  REQUIRE(std::string(comm->name()) == "nccl");
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    const int64_t n = 1000003;
    test::TestBuffer buffer(Device::cuda, dtype, n);
    std::vector<unsigned char> before(buffer.view().bytes()), after(buffer.view().bytes());
    for (size_t i = 0; i < before.size(); ++i)
      before[i] = static_cast<unsigned char>((i * 37) % 61);
    buffer.upload(before.data());
    comm->all_reduce_sum(buffer.view());  // the sum over one rank is the buffer itself
    buffer.download(after.data());
    REQUIRE(before == after);
  }
  test::check_sum_odd_sizes(*comm, Device::cuda);
  test::check_broadcast(*comm, Device::cuda);
  test::check_verify_identical(*comm, Device::cuda);
}

TEST_CASE("nccl buckets start on the communication stream and time themselves", "[comm][nccl]") {
  auto comm = nccl_comm();
  test::check_buckets_match_plain_sum(*comm, Device::cuda);

  const int64_t n = 4 << 20;
  test::TestBuffer grads(Device::cuda, DType::f32, n);
  cudaStream_t compute = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
  GradBuckets buckets(*comm, grads.view(), 4 << 20);  // 4 buckets of 1 Mi f32
  buckets.set_compute_stream(compute);
  REQUIRE(buckets.buckets().size() == 4);
  for (int b = 3; b >= 0; --b) {  // the last bucket first: nothing starts before bucket 0
    REQUIRE(cudaMemsetAsync(static_cast<float*>(grads.view().data) + buckets.buckets()[b].begin, 0,
                            buckets.buckets()[b].size() * 4, compute) == cudaSuccess);
    buckets.mark_ready(buckets.buckets()[b].begin, buckets.buckets()[b].size());
  }
  buckets.finish();
  const GradExchangeStats& s = buckets.stats();
  REQUIRE(s.collectives == 4);  // startable together, still one collective per bucket, in order
  REQUIRE(s.bytes == n * 4);
  REQUIRE(s.comm_seconds > 0);
  REQUIRE(s.exposed_seconds >= 0);
  REQUIRE(s.busbw_gbps == 0);  // one rank
  REQUIRE(cudaStreamDestroy(compute) == cudaSuccess);
}

TEST_CASE("nccl routes CPU buffers to the host backend and rejects mixed requests",
          "[comm][nccl]") {
  auto comm = nccl_comm();
  std::vector<float> host = {1, 2, 3};
  Tensor cpu(host.data(), DType::f32, Device::cpu, {3});
  comm->all_reduce_sum(cpu);
  REQUIRE(host == std::vector<float>{1, 2, 3});
  test::TestBuffer gpu(Device::cuda, DType::f32, 3);
  std::vector<Tensor> mixed = {cpu, gpu.view()};
  REQUIRE_THROWS_AS(comm->start_all_reduce_sum(mixed, "mixed"), CommError);
  REQUIRE(comm->all_reduce_host({2.5}) == std::vector<double>{2.5});
  comm->barrier();
}

TEST_CASE("the GPU checksum equals the CPU checksum", "[comm][nccl][checksum]") {
  const size_t bytes = (1 << 20) + 7;
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  test::TestBuffer device(Device::cuda, DType::bf16, static_cast<int64_t>(bytes / 2 + 1));
  std::vector<unsigned char> padded(device.view().bytes(), 0);
  std::copy(host.begin(), host.end(), padded.begin());
  device.upload(padded.data());
  for (size_t offset : {size_t{0}, size_t{1}, size_t{2}, size_t{6}}) {
    for (size_t length :
         {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{1000}, bytes - offset}) {
      INFO("offset " << offset << " length " << length);
      const auto* gpu = static_cast<const unsigned char*>(device.view().data) + offset;
      REQUIRE(comm_detail::checksum_bytes_cuda(gpu, length, nullptr) ==
              comm_detail::checksum_bytes_cpu(host.data() + offset, length));
    }
  }
  Tensor gpu_view(device.view().data, DType::bf16, Device::cuda, {1000});
  Tensor cpu_view(padded.data(), DType::bf16, Device::cpu, {1000});
  REQUIRE(tensor_checksum(gpu_view) == tensor_checksum(cpu_view));
}

}  // namespace
}  // namespace nmt
