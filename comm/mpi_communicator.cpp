// MpiCommunicator: reduce-scatter + all-gather sums, broadcast, host reductions and barrier over
// non-blocking MPI calls, each waited on with MPI_Test polls and a timeout.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "comm/check.h"

namespace nmt {
namespace comm_detail {

// The in-place sum of one buffer: reduce-scatter leaves this rank's reduced slice at the front of
// the buffer; it is moved to its own place and then all-gathered into everybody's buffer.
struct SlicedSum {
  float* data = nullptr;     // [n] f32
  std::vector<int> counts;   // [ranks] slice lengths
  std::vector<int> offsets;  // [ranks] slice starts
  enum class Phase { reduce_scatter, all_gather, done } phase = Phase::reduce_scatter;
  MPI_Request request = MPI_REQUEST_NULL;
};

}  // namespace comm_detail

namespace {

using comm_detail::SlicedSum;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class MpiAllReduceRequest final : public CommRequest {
 public:
  MpiAllReduceRequest(MpiCommunicator& comm, std::span<const Tensor> buffers, std::string label)
      : CommRequest(std::move(label)), comm_(comm), start_(Clock::now()) {
    // Check every buffer before starting any, so a bad one leaves nothing in flight.
    for (const Tensor& buffer : buffers) check_buffer(buffer);
    sums_.reserve(buffers.size());
    for (const Tensor& buffer : buffers) start_one(buffer);
  }

  // An MPI collective cannot be freed or cancelled while in flight: finish it (or time out).
  ~MpiAllReduceRequest() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      comm_.abort(e.what());
    }
  }

  bool test() override {
    if (done_) return true;
    bool all_done = true;
    comm_.progress();
    for (auto& sum : sums_) all_done = finished(*sum) && all_done;
    if (all_done) {
      done_ = true;
      seconds_ = seconds_since(start_);
    }
    return done_;
  }

  void wait() override {
    const Clock::time_point waiting_since = Clock::now();
    while (!test()) {
      if (seconds_since(waiting_since) > comm_.timeout_seconds()) comm_.abort_on_timeout(label());
      std::this_thread::yield();  // MPI progresses only inside MPI_Test: keep polling
    }
  }

  double seconds() const override { return seconds_; }

 private:
  void check_buffer(const Tensor& buffer) const {
    const std::string what = "mpi " + label() + ": buffer " + buffer.shape_string();
    if (buffer.device != Device::cpu) {
      throw CommError(what + " is on the GPU; the mpi backend reduces CPU buffers (use nccl)");
    }
    if (buffer.dtype != DType::f32) {
      throw CommError(what + ": the mpi backend sums f32 buffers only");
    }
    if (buffer.numel() > INT_MAX) throw CommError(what + " has more than 2^31-1 elements");
  }

  void start_one(const Tensor& buffer) {
    const int64_t n = buffer.numel();
    const int ranks = comm_.size();
    auto sum = std::make_unique<SlicedSum>();
    sum->data = static_cast<float*>(buffer.data);
    sum->counts.resize(ranks);
    sum->offsets.resize(ranks);
    int64_t at = 0;
    for (int r = 0; r < ranks; ++r) {
      sum->counts[r] = static_cast<int>(n / ranks + (r < n % ranks ? 1 : 0));
      sum->offsets[r] = static_cast<int>(at);
      at += sum->counts[r];
    }
    MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, sum->data, sum->counts.data(), MPI_FLOAT, MPI_SUM,
                                  comm_.reduce_handle(), &sum->request));
    comm_.queue_all_gather(sum.get());
    sums_.push_back(std::move(sum));
  }

  // True once the buffer's all-gather is done (the communicator starts it: progress()).
  bool finished(SlicedSum& sum) {
    if (sum.phase == SlicedSum::Phase::done) return true;
    if (sum.phase == SlicedSum::Phase::reduce_scatter) return false;
    int complete = 0;
    MPI_CHECK(MPI_Test(&sum.request, &complete, MPI_STATUS_IGNORE));
    if (complete) sum.phase = SlicedSum::Phase::done;
    return complete != 0;
  }

  MpiCommunicator& comm_;
  std::vector<std::unique_ptr<SlicedSum>> sums_;  // stable addresses: the communicator queues them
  Clock::time_point start_;
  double seconds_ = 0;
  bool done_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(const RankInfo& ranks, CommOptions options)
    : Communicator(ranks, options) {
  int initialised = 0;
  MPI_CHECK(MPI_Initialized(&initialised));
  if (!initialised) {
    throw CommError("communicator \"mpi\": MPI is not initialised (call nmt::init_ranks first)");
  }
  int mpi_rank = 0, mpi_size = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &mpi_size));
  if (mpi_rank != ranks.world_rank || mpi_size != ranks.world_size) {
    throw CommError("communicator \"mpi\": RankInfo says rank " + std::to_string(ranks.world_rank) +
                    " of " + std::to_string(ranks.world_size) + " but MPI says " +
                    std::to_string(mpi_rank) + " of " + std::to_string(mpi_size));
  }
  // A private duplicate keeps our traffic apart from the caller's and lets us have errors
  // returned (MPI_CHECK) instead of MPI's default abort.
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request));
  const Clock::time_point start = Clock::now();
  for (int finished = 0; !finished;) {
    MPI_CHECK(MPI_Test(&request, &finished, MPI_STATUS_IGNORE));
    if (!finished && seconds_since(start) > timeout_seconds()) {
      abort_on_timeout("creating the MPI communicator");
    }
  }
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  for (MPI_Comm* extra : {&reduce_comm_, &gather_comm_}) {
    MPI_CHECK(MPI_Comm_idup(comm_, extra, &request));
    wait_or_abort(request, "creating the MPI communicator");
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (finalised) return;
  if (gather_comm_ != MPI_COMM_NULL) MPI_Comm_free(&gather_comm_);
  if (reduce_comm_ != MPI_COMM_NULL) MPI_Comm_free(&reduce_comm_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::progress() {
  while (!awaiting_gather_.empty()) {
    SlicedSum& sum = *awaiting_gather_.front();
    int complete = 0;
    MPI_CHECK(MPI_Test(&sum.request, &complete, MPI_STATUS_IGNORE));
    if (!complete) return;  // later sums wait their turn even if their reduce-scatter is done
    awaiting_gather_.pop_front();
    const int me = rank();
    if (sum.offsets[me] != 0) {
      std::memmove(sum.data + sum.offsets[me], sum.data, sum.counts[me] * sizeof(float));
    }
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, sum.data, sum.counts.data(),
                              sum.offsets.data(), MPI_FLOAT, gather_comm_, &sum.request));
    sum.phase = SlicedSum::Phase::all_gather;
  }
}

void MpiCommunicator::abort_on_timeout(const std::string& label) {
  abort(timeout_reason(label));
}

void MpiCommunicator::wait_or_abort(MPI_Request& request, const std::string& label) {
  const Clock::time_point start = Clock::now();
  for (int finished = 0;;) {
    MPI_CHECK(MPI_Test(&request, &finished, MPI_STATUS_IGNORE));
    if (finished) return;
    progress();  // sums in flight keep moving while the program waits for something else
    if (seconds_since(start) > timeout_seconds()) abort_on_timeout(label);
    std::this_thread::yield();
  }
}

std::unique_ptr<CommRequest> MpiCommunicator::start_all_reduce_sum_impl(
    std::span<const Tensor> buffers, std::string label, cudaStream_t) {
  return std::make_unique<MpiAllReduceRequest>(*this, buffers, std::move(label));
}

void MpiCommunicator::broadcast_impl(const Tensor& buffer, int root) {
  if (buffer.device != Device::cpu) {
    throw CommError("mpi broadcast: buffer " + buffer.shape_string() +
                    " is on the GPU; the mpi backend moves CPU buffers (use nccl)");
  }
  // MPI counts are ints: send in pieces of at most 1 GiB.
  constexpr size_t kPiece = size_t{1} << 30;
  auto* bytes = static_cast<char*>(buffer.data);
  for (size_t at = 0; at < buffer.bytes(); at += kPiece) {
    const size_t length = std::min(kPiece, buffer.bytes() - at);
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ibcast(bytes + at, static_cast<int>(length), MPI_BYTE, root, comm_, &request));
    wait_or_abort(request, "broadcast from rank " + std::to_string(root));
  }
}

std::vector<double> MpiCommunicator::all_reduce_host_impl(std::vector<double> values,
                                                          HostReduce op) {
  const int count = static_cast<int>(values.size());
  MPI_Request request = MPI_REQUEST_NULL;
  if (op == HostReduce::sum) {
    // Gather everything and add in rank order: the same bits on every rank by construction.
    std::vector<double> all(values.size() * size());
    MPI_CHECK(MPI_Iallgather(values.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, comm_,
                             &request));
    wait_or_abort(request, "host all-reduce (sum)");
    for (int i = 0; i < count; ++i) {
      double total = 0;
      for (int r = 0; r < size(); ++r) total += all[static_cast<size_t>(r) * count + i];
      values[i] = total;
    }
    return values;
  }
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, values.data(), count, MPI_DOUBLE,
                           op == HostReduce::min ? MPI_MIN : MPI_MAX, comm_, &request));
  wait_or_abort(request, op == HostReduce::min ? "host all-reduce (min)" : "host all-reduce (max)");
  return values;
}

void MpiCommunicator::barrier_impl() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm_, &request));
  wait_or_abort(request, "barrier");
}

}  // namespace nmt
