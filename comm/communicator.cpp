// The Communicator front end (argument checks, the divergence check), the single-process backend
// and the factory that picks a backend by name.
#include "comm/communicator.h"

#include <cmath>
#include <cstdio>

#include "comm/check.h"
#include "comm/checksum.h"
#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace nmt {
namespace {

class CompletedRequest final : public CommRequest {
 public:
  explicit CompletedRequest(std::string label) : CommRequest(std::move(label)) {}
  bool test() override { return true; }
  void wait() override {}
  double seconds() const override { return 0; }
};

// One process: every reduction over one rank is the identity.
class SingleProcessCommunicator final : public Communicator {
 public:
  SingleProcessCommunicator(const RankInfo& ranks, CommOptions options)
      : Communicator(ranks, options) {}
  const char* name() const override { return "single"; }

 private:
  std::unique_ptr<CommRequest> start_all_reduce_sum_impl(std::span<const Tensor>, std::string label,
                                                         cudaStream_t) override {
    return make_completed_request(std::move(label));
  }
  void broadcast_impl(const Tensor&, int) override {}
  std::vector<double> all_reduce_host_impl(std::vector<double> values, HostReduce) override {
    return values;
  }
  void barrier_impl() override {}
};

std::string hex64(uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

std::unique_ptr<CommRequest> make_completed_request(std::string label) {
  return std::make_unique<CompletedRequest>(std::move(label));
}

void Communicator::set_timeout_seconds(double seconds) {
  if (!(seconds > 0)) {
    throw CommError("communicator timeout must be > 0 seconds, got " + std::to_string(seconds));
  }
  options_.timeout_seconds = seconds;
}

std::string Communicator::timeout_reason(const std::string& label) const {
  double t = options_.timeout_seconds;
  char amount[32];
  if (t == std::floor(t)) {
    std::snprintf(amount, sizeof amount, "%.0f", t);
  } else {
    std::snprintf(amount, sizeof amount, "%.3g", t);
  }
  return label + " timed out after " + amount + " s (a peer rank is dead or stuck)";
}

void Communicator::all_reduce_sum(const Tensor& buffer, const std::string& label) {
  start_all_reduce_sum(buffer, label)->wait();
}

std::unique_ptr<CommRequest> Communicator::start_all_reduce_sum(std::span<const Tensor> buffers,
                                                                std::string label,
                                                                cudaStream_t producer) {
  std::vector<Tensor> nonempty;
  for (const Tensor& t : buffers) {
    if (t.numel() == 0) continue;
    if (t.empty())
      throw CommError(std::string(name()) + " " + label + ": null buffer " + t.shape_string());
    nonempty.push_back(t);
  }
  if (nonempty.empty()) return make_completed_request(std::move(label));
  return start_all_reduce_sum_impl(nonempty, std::move(label), producer);
}

std::unique_ptr<CommRequest> Communicator::start_all_reduce_sum(const Tensor& buffer,
                                                                std::string label,
                                                                cudaStream_t producer) {
  return start_all_reduce_sum(std::span<const Tensor>(&buffer, 1), std::move(label), producer);
}

void Communicator::broadcast(const Tensor& buffer, int root) {
  if (root < 0 || root >= size()) {
    throw CommError(std::string(name()) + " broadcast: root " + std::to_string(root) +
                    " is not a rank of " + std::to_string(size()));
  }
  if (buffer.numel() == 0) return;
  if (buffer.empty())
    throw CommError(std::string(name()) + " broadcast: null buffer " + buffer.shape_string());
  broadcast_impl(buffer, root);
}

std::vector<double> Communicator::all_reduce_host(std::vector<double> values, HostReduce op) {
  if (values.empty()) return values;
  return all_reduce_host_impl(std::move(values), op);
}

void Communicator::barrier() {
  barrier_impl();
}

void Communicator::abort(const std::string& reason) {
  abort_job(ranks_, reason);
}

void Communicator::verify_identical(const Tensor& params, int64_t step) {
  // Every rank's checksum reaches every rank: each fills its own two slots (the 32-bit halves are
  // exact in a double) and the sum over ranks of these one-hot vectors gathers them all.
  uint64_t mine = tensor_checksum(params);
  std::vector<double> slots(2 * static_cast<size_t>(size()), 0.0);
  slots[2 * rank()] = static_cast<double>(mine >> 32);
  slots[2 * rank() + 1] = static_cast<double>(mine & 0xffffffffu);
  slots = all_reduce_host(std::move(slots), HostReduce::sum);
  auto checksum_of = [&](int r) {
    return (static_cast<uint64_t>(slots[2 * r]) << 32) | static_cast<uint64_t>(slots[2 * r + 1]);
  };
  for (int r = 1; r < size(); ++r) {
    if (checksum_of(r) != checksum_of(0)) {
      throw CommError("parameters diverged across ranks at step " + std::to_string(step) +
                      " (rank " + std::to_string(r) + " checksum " + hex64(checksum_of(r)) +
                      ", rank 0 checksum " + hex64(checksum_of(0)) + "; " + params.shape_string() +
                      ")");
    }
  }
}

std::unique_ptr<Communicator> make_communicator(const std::string& kind, const RankInfo& ranks,
                                                CommOptions options) {
  if (!(options.timeout_seconds > 0)) {
    throw CommError("communicator timeout must be > 0 seconds, got " +
                    std::to_string(options.timeout_seconds));
  }
  if (kind == "single") {
    if (ranks.world_size != 1) {
      throw CommError("communicator \"single\" cannot serve " + std::to_string(ranks.world_size) +
                      " ranks: use \"mpi\" (CPU) or \"nccl\" (GPU)");
    }
    return std::make_unique<SingleProcessCommunicator>(ranks, options);
  }
  if (kind == "mpi") return std::make_unique<MpiCommunicator>(ranks, options);
  if (kind == "nccl") return std::make_unique<NcclCommunicator>(ranks, options);
  throw CommError("unknown communicator \"" + kind + "\": expected single, mpi or nccl");
}

}  // namespace nmt
