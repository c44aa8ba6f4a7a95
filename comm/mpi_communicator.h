// MpiCommunicator: collectives over MPI on CPU buffers, each polled with a watchdog so a dead or
// stuck peer ends the job with a message instead of a hang.
#pragma once

#include <mpi.h>

#include <deque>
#include <string>

#include "comm/communicator.h"

namespace nmt {

namespace comm_detail {
struct SlicedSum;  // one buffer's reduce-scatter + all-gather (mpi_communicator.cpp)
}

// Sums are reduce-scatter + all-gather: each slice of the buffer is reduced on exactly one rank
// and then copied to all, so every rank holds the same bits whatever algorithm MPI picks (a plain
// MPI_Allreduce only recommends that). f32 only. Needs MPI up (init_ranks).
//
// MPI requires every rank to issue the collectives of a communicator in the same order, so each
// kind gets its own duplicate of MPI_COMM_WORLD: broadcast, host reductions and barrier in program
// order; reduce-scatters in the order sums are started (GradBuckets starts buckets in index
// order); all-gathers, which begin whenever a poll sees a reduce-scatter done, strictly in the
// order of their reduce-scatters.
class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const RankInfo& ranks, CommOptions options);
  ~MpiCommunicator() override;

  const char* name() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }  // a duplicate of MPI_COMM_WORLD, errors returned
  MPI_Comm reduce_handle() const { return reduce_comm_; }

  // Polls `request` (MPI_Test) until it completes; after the timeout prints
  // "rank R: <label> timed out after T s (a peer rank is dead or stuck)" and aborts the job:
  // an MPI collective cannot be cancelled, and finalising beside one hangs.
  void wait_or_abort(MPI_Request& request, const std::string& label);
  [[noreturn]] void abort_on_timeout(const std::string& label);

  // Used by the sums in flight: queue a sum for its all-gather, and start the all-gathers whose
  // turn has come (their reduce-scatter is done and every earlier one has started).
  void queue_all_gather(comm_detail::SlicedSum* sum) { awaiting_gather_.push_back(sum); }
  void progress();

 private:
  std::unique_ptr<CommRequest> start_all_reduce_sum_impl(
      std::span<const Tensor> buffers,  // each [n_i]
      std::string label, cudaStream_t producer) override;
  void broadcast_impl(const Tensor& buffer /* [n] */, int root) override;
  std::vector<double> all_reduce_host_impl(std::vector<double> values, HostReduce op) override;
  void barrier_impl() override;

  MPI_Comm comm_ = MPI_COMM_NULL;         // broadcast, host reductions, barrier
  MPI_Comm reduce_comm_ = MPI_COMM_NULL;  // the reduce-scatters of the sums, in start order
  MPI_Comm gather_comm_ = MPI_COMM_NULL;  // the all-gathers of the sums, in start order
  std::deque<comm_detail::SlicedSum*> awaiting_gather_;
};

}  // namespace nmt
