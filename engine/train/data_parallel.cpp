// DataParallel: launch detection, bootstrap, parameter broadcast, gradient all-reduce.
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace nmt {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

DataParallel::DataParallel(const DistConfig& cfg, Device device, bool allow_mpi)
    : bucket_mb_(cfg.bucket_mb), wire_dtype_(cfg.allreduce_dtype), overlap_(cfg.overlap) {
  CommOptions options;
  options.timeout_seconds = static_cast<double>(cfg.timeout_s);
  if (allow_mpi && launched_by_mpi()) {
    ranks_ = init_ranks();
    mpi_ = true;
    if (device == Device::cuda) select_gpu(ranks_);
    backend_ = ranks_.world_size == 1 ? "single" : (device == Device::cuda ? "nccl" : "mpi");
  }
  comm_ = make_communicator(backend_, ranks_, options);
}

DataParallel::~DataParallel() {
  buckets_.reset();
  comm_.reset();
  if (mpi_ && !std::uncaught_exceptions()) finalize_ranks();
}

void DataParallel::attach(ParamStore& params) {
  if (world_size() == 1) return;
  Tensor master = params.master();
  comm_->broadcast(master, 0);
  params.sync_compute();
  std::vector<ElementRange> ranges;
  for (const Param& p : params.params()) ranges.push_back({p.offset, p.offset + p.numel});
  std::sort(ranges.begin(), ranges.end(),
            [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
  auto bytes = static_cast<size_t>(bucket_mb_ * (1 << 20));
  buckets_ =
      std::make_unique<GradBuckets>(*comm_, params.grads(), bytes, std::move(ranges), wire_dtype_);
}

void DataParallel::mark_ready(const Param& p) {
  if (buckets_) buckets_->mark_ready(p.offset, p.numel);
}

int DataParallel::buckets_completed_by(const std::vector<const Param*>& params) const {
  if (!buckets_) return 0;
  std::vector<ElementRange> ranges;
  ranges.reserve(params.size());
  for (const Param* p : params) ranges.push_back({p->offset, p->offset + p->numel});
  return buckets_->leading_buckets_filled(ranges);
}

const GradExchangeStats& DataParallel::reduce_gradients() {
  if (!buckets_) return no_exchange_;
  buckets_->mark_all_ready();
  buckets_->finish();
  return buckets_->stats();
}

std::vector<double> DataParallel::sum(std::vector<double> values) {
  if (world_size() == 1) return values;
  return comm_->all_reduce_host(std::move(values));
}

void DataParallel::verify_parameters(const ParamStore& params, int64_t step, int64_t every) {
  if (world_size() == 1 || every <= 0 || step % every != 0) return;
  comm_->verify_identical(params.master(), step);
}

void DataParallel::abort(const std::string& reason) {
  if (comm_) comm_->abort(reason);  // does not return
  abort_job(ranks_, reason);
}

}  // namespace nmt
