// NcclCommunicator: collectives on GPU buffers with NCCL on a dedicated high-priority stream; a
// non-blocking NCCL communicator polled with ncclCommGetAsyncError and a timeout, so a dead or
// stuck peer aborts the communicator and raises CommError naming the rank and the operation.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace nmt {

// One rank per GPU: the constructor selects GPU local_rank (select_gpu), sets NCCL_NVLS_ENABLE=0
// unless the environment sets it, shares the NCCL id over MPI and creates the communicator. Host
// values, barriers and CPU buffers go over MPI (an MpiCommunicator inside); without MPI up, a
// single-rank communicator works alone.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankInfo& ranks, CommOptions options);
  ~NcclCommunicator() override;

  const char* name() const override { return "nccl"; }
  [[noreturn]] void abort(const std::string& reason) override;

  cudaStream_t stream() const { return stream_; }  // where every NCCL collective runs
  int device() const { return device_; }

  // Used by the requests: poll for an asynchronous NCCL error, fail (ncclCommAbort, then throw
  // CommError "rank R: <message>"), and lend the CUDA events a request records.
  void check_async_error(const std::string& label);
  [[noreturn]] void fail(const std::string& message);
  [[noreturn]] void fail_timeout(const std::string& label) { fail(timeout_reason(label)); }
  cudaEvent_t take_event();
  void return_event(cudaEvent_t event);

 private:
  std::unique_ptr<CommRequest> start_all_reduce_sum_impl(
      std::span<const Tensor> buffers,  // each [n_i]
      std::string label, cudaStream_t producer) override;
  void broadcast_impl(const Tensor& buffer /* [n] */, int root) override;
  std::vector<double> all_reduce_host_impl(std::vector<double> values, HostReduce op) override;
  void barrier_impl() override;

  // Enqueues `collectives` on the communication stream after the producer's work, between the
  // request's timing events, as one NCCL group.
  std::unique_ptr<CommRequest> launch(std::string label, cudaStream_t producer,
                                      const std::function<void()>& collectives);
  // Waits out ncclInProgress from a non-blocking call; fails on an error or the timeout.
  void settle(ncclResult_t result, const std::string& label);
  void check_usable(const std::string& label) const;

  std::unique_ptr<Communicator> host_;  // mpi, or single when MPI is not up and there is one rank
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  bool aborted_ = false;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace nmt
