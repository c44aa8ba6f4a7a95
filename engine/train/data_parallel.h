// DataParallel: the trainer's view of a data-parallel job. Under mpirun it bootstraps MPI, picks
// this rank's GPU, broadcasts the initial parameters from rank 0 and sums gradients over ranks in
// buckets (MPI on CPU buffers, NCCL on GPU buffers); launched without mpirun it is a single
// process that never touches MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "comm/communicator.h"
#include "comm/grad_buckets.h"
#include "engine/config/config.h"
#include "engine/model/param_store.h"

namespace nmt {

// True when this process was started by an MPI launcher (mpirun / mpiexec / srun with PMI).
bool launched_by_mpi();

class DataParallel {
 public:
  // allow_mpi false: a single process even under mpirun.
  DataParallel(const DistConfig& cfg, Device device, bool allow_mpi = true);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return ranks_.world_rank; }
  int world_size() const { return ranks_.world_size; }
  bool is_root() const { return ranks_.world_rank == 0; }
  const std::string& backend() const { return backend_; }
  Communicator& communicator() { return *comm_; }  // e.g. for the start-up bandwidth probe

  // Makes every rank start from rank 0's parameters and lays the gradient buckets over the store's
  // flat gradient buffer (parameter boundaries kept inside buckets where they fit).
  void attach(ParamStore& params);
  // True when backward should report finished gradients (mark_ready) so the exchange overlaps it:
  // several ranks and dist.overlap.
  bool overlaps_backward() const { return buckets_ != nullptr && overlap_; }
  // During the last micro-batch's backward: p's gradient is final, its bucket may start.
  void mark_ready(const Param& p);
  // How many buckets, from the front, these parameters' gradients fill (Transformer's
  // ExchangeProgress: backward holds finished stages back until the count grows); 0 alone.
  int buckets_completed_by(const std::vector<const Param*>& params) const;
  // After the last micro-batch's backward: sums the gradient buffer over ranks (no-op alone),
  // starting whatever mark_ready has not. Returns the exchange statistics of this step.
  const GradExchangeStats& reduce_gradients();
  // Element-wise sum over ranks of a few host values (token counts, loss sums).
  std::vector<double> sum(std::vector<double> values);
  // Throws when ranks' parameters differ (every `every` steps; 0 = never).
  void verify_parameters(const ParamStore& params, int64_t step, int64_t every);
  // Ends every rank with a message naming this one.
  [[noreturn]] void abort(const std::string& reason);

 private:
  RankInfo ranks_;
  bool mpi_ = false;
  std::string backend_ = "single";
  double bucket_mb_;
  DType wire_dtype_;
  bool overlap_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradBuckets> buckets_;
  GradExchangeStats no_exchange_;
};

}  // namespace nmt
