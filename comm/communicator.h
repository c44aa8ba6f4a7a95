// Communicator: the collective operations data-parallel training needs (sum all-reduce, broadcast,
// host-side reductions of a few numbers, barrier, abort), behind one interface with three
// implementations picked at run time: "single" (one process, no-ops), "mpi" (CPU buffers) and
// "nccl" (GPU buffers on a dedicated communication stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "kernels/tensor.h"

namespace nmt {

enum class HostReduce : uint8_t { sum, min, max };

struct CommOptions {
  // The longest one collective may block before the job is taken down: a peer rank is then dead
  // or stuck. Raise it around phases where one rank works alone while the others wait.
  double timeout_seconds = 60;
};

// One collective in flight. It must not outlive the communicator that started it.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;

  // True once the collective is complete; never blocks. MPI makes progress only inside MPI calls,
  // so calling this now and then moves the transfer along.
  virtual bool test() = 0;
  // Blocks until complete. A peer that does not join within the communicator's timeout ends the
  // job (mpi) or throws CommError naming the rank and the operation (nccl).
  virtual void wait() = 0;
  // How long the collective took, once complete: GPU time between CUDA events on the
  // communication stream (nccl), or host time from start until a test()/wait() saw it done (mpi).
  virtual double seconds() const = 0;
  // nccl: the timing event recorded on the communication stream after the collective, so callers
  // can measure how far it ran past their own work; nullptr for the other backends.
  virtual cudaEvent_t done_event() const { return nullptr; }

  const std::string& label() const { return label_; }  // e.g. "all-reduce of bucket 3"

 protected:
  explicit CommRequest(std::string label) : label_(std::move(label)) {}

 private:
  std::string label_;
};

class Communicator {
 public:
  Communicator(const RankInfo& ranks, CommOptions options) : ranks_(ranks), options_(options) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return ranks_.world_rank; }
  int size() const { return ranks_.world_size; }
  const RankInfo& ranks() const { return ranks_; }
  virtual const char* name() const = 0;  // "single", "mpi" or "nccl"

  double timeout_seconds() const { return options_.timeout_seconds; }
  void set_timeout_seconds(double seconds);

  // Replaces buffer with its element-wise sum over all ranks; every rank ends with the same bits.
  // mpi: CPU f32; nccl: GPU f32/bf16/f16/i32 (CPU buffers go over MPI); single: anything.
  void all_reduce_sum(const Tensor& buffer, const std::string& label = "all-reduce");  // [n]

  // Starts summing each of `buffers` over ranks in place and returns at once; one request covers
  // them all (nccl launches them as one group). `producer` is the CUDA stream whose work writes
  // the buffers (nullptr: nmt::cuda::current_stream()); the collective waits for it on the GPU.
  std::unique_ptr<CommRequest> start_all_reduce_sum(std::span<const Tensor> buffers,  // each [n_i]
                                                    std::string label,
                                                    cudaStream_t producer = nullptr);
  std::unique_ptr<CommRequest> start_all_reduce_sum(const Tensor& buffer /* [n] */,
                                                    std::string label,
                                                    cudaStream_t producer = nullptr);

  // Copies root's buffer to every rank (any dtype), in place; returns when done.
  void broadcast(const Tensor& buffer, int root);  // [n]

  // Element-wise reduction of a few host values (token counts, loss sums) over ranks. The sum adds
  // the ranks' values in rank order, so every rank gets the same bits.
  std::vector<double> all_reduce_host(std::vector<double> values, HostReduce op = HostReduce::sum);

  void barrier();

  // Prints "rank R: <reason>" and ends every rank of the job with a non-zero exit code.
  [[noreturn]] virtual void abort(const std::string& reason);

  // Throws CommError "parameters diverged across ranks at step N (rank r checksum ...)" on every
  // rank when the 64-bit checksum of params (comm/checksum.h) is not the same on all of them.
  void verify_identical(const Tensor& params, int64_t step);  // [n] any dtype, cpu or cuda

 protected:
  // "<label> timed out after 60 s (a peer rank is dead or stuck)"
  std::string timeout_reason(const std::string& label) const;

  RankInfo ranks_;
  CommOptions options_;

 private:
  virtual std::unique_ptr<CommRequest> start_all_reduce_sum_impl(
      std::span<const Tensor> buffers,  // each [n_i]
      std::string label, cudaStream_t producer) = 0;
  virtual void broadcast_impl(const Tensor& buffer /* [n] */, int root) = 0;
  virtual std::vector<double> all_reduce_host_impl(std::vector<double> values, HostReduce op) = 0;
  virtual void barrier_impl() = 0;
};

// kind: "single", "mpi" or "nccl" (which also selects GPU local_rank and needs it present).
// Throws CommError for an unknown kind, or "single" with more than one rank.
std::unique_ptr<Communicator> make_communicator(const std::string& kind, const RankInfo& ranks,
                                                CommOptions options = {});

// A request that is complete when made (the single-process backend, empty buffers).
std::unique_ptr<CommRequest> make_completed_request(std::string label);

}  // namespace nmt
