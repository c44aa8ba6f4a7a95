// NcclCommunicator: NCCL setup over an MPI-shared id, grouped all-reduce and broadcast on the
// communication stream, CUDA-event requests, and the error/timeout watchdog.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/check.h"
#include "comm/mpi_communicator.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace nmt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ncclDataType_t nccl_type(const Tensor& t, const std::string& label) {
  switch (t.dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
  }
  throw CommError("nccl " + label + ": unsupported dtype of " + t.shape_string());
}

// One NCCL group in flight, bracketed by CUDA events on the communication stream.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(NcclCommunicator& comm, std::string label)
      : CommRequest(std::move(label)),
        comm_(comm),
        ready_(comm.take_event()),
        start_(comm.take_event()),
        done_(comm.take_event()) {}

  ~NcclRequest() override {
    comm_.return_event(ready_);
    comm_.return_event(start_);
    comm_.return_event(done_);
  }

  cudaEvent_t ready_event() const { return ready_; }
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t done_event() const override { return done_; }

  bool test() override {
    if (finished_) return true;
    cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) {
      comm_.check_async_error(label());
      return false;
    }
    if (status != cudaSuccess) {
      comm_.fail(label() + " failed: " + cudaGetErrorString(status));
    }
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start_, done_));
    seconds_ = ms * 1e-3;
    finished_ = true;
    return true;
  }

  void wait() override {
    const Clock::time_point start = Clock::now();
    while (!test()) {
      if (seconds_since(start) > comm_.timeout_seconds()) comm_.fail_timeout(label());
      std::this_thread::yield();
    }
  }

  double seconds() const override { return seconds_; }

 private:
  NcclCommunicator& comm_;
  cudaEvent_t ready_, start_, done_;
  double seconds_ = 0;
  bool finished_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(const RankInfo& ranks, CommOptions options)
    : Communicator(ranks, options) {
  // NVLink SHARP (NVLS) multicast must stay off on the GPU machines; NCCL reads its environment
  // once, at the first NCCL call, so this comes before ncclGetUniqueId.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  device_ = select_gpu(ranks);

  int mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (mpi_up) {
    host_ = std::make_unique<MpiCommunicator>(ranks, options);
  } else if (ranks.world_size == 1) {
    host_ = make_communicator("single", ranks, options);
  } else {
    throw CommError("communicator \"nccl\": " + std::to_string(ranks.world_size) +
                    " ranks but MPI is not initialised (call nmt::init_ranks first)");
  }

  ncclUniqueId id{};
  if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof id % 4 == 0, "the NCCL id travels as 32-bit words");
  host_->broadcast(Tensor(&id, DType::i32, Device::cpu, {static_cast<int64_t>(sizeof id / 4)}), 0);

  // Non-blocking: setup and collectives return at once (ncclInProgress), so the watchdog can
  // time them out instead of hanging inside NCCL.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  settle(NCCL_CHECK(ncclCommInitRankConfig(&comm_, size(), id, rank(), &config)),
         "NCCL communicator setup");

  // The highest priority lets bucket all-reduces start between backward kernels.
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr && !aborted_) {
    try {
      if (stream_ != nullptr) {
        auto drained = std::make_unique<NcclRequest>(*this, "draining the communication stream");
        CUDA_CHECK(cudaEventRecord(drained->start_event(), stream_));
        CUDA_CHECK(cudaEventRecord(drained->done_event(), stream_));
        drained->wait();
      }
      settle(NCCL_CHECK(ncclCommFinalize(comm_)), "NCCL communicator shutdown");
      ncclCommDestroy(comm_);
    } catch (const std::exception&) {
      if (!aborted_) ncclCommAbort(comm_);
    }
  }
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::abort(const std::string& reason) {
  if (comm_ != nullptr && !aborted_) {
    aborted_ = true;
    ncclCommAbort(comm_);
  }
  abort_job(ranks_, reason);
}

void NcclCommunicator::fail(const std::string& message) {
  if (comm_ != nullptr && !aborted_) {
    aborted_ = true;
    ncclCommAbort(comm_);  // also stops this rank's kernels still waiting for the peers
  }
  throw CommError("rank " + std::to_string(rank()) + ": " + message);
}

void NcclCommunicator::check_async_error(const std::string& label) {
  if (aborted_) fail(label + ": the NCCL communicator was aborted after an earlier failure");
  ncclResult_t state = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
  if (state != ncclSuccess && state != ncclInProgress) {
    const char* detail = ncclGetLastError(comm_);
    fail(label + " failed: NCCL " + ncclGetErrorString(state) +
         (detail && *detail ? std::string(" (") + detail + ")" : std::string()));
  }
}

void NcclCommunicator::settle(ncclResult_t result, const std::string& label) {
  if (result == ncclSuccess) return;
  const Clock::time_point start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check_async_error(label);
    if (seconds_since(start) > timeout_seconds()) fail_timeout(label);
    std::this_thread::yield();
  }
}

void NcclCommunicator::check_usable(const std::string& label) const {
  if (aborted_) {
    throw CommError("rank " + std::to_string(rank()) + ": " + label +
                    ": the NCCL communicator was aborted after an earlier failure");
  }
}

cudaEvent_t NcclCommunicator::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t event = spare_events_.back();
    spare_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreate(&event));
  return event;
}

void NcclCommunicator::return_event(cudaEvent_t event) {
  spare_events_.push_back(event);
}

std::unique_ptr<CommRequest> NcclCommunicator::launch(std::string label, cudaStream_t producer,
                                                      const std::function<void()>& collectives) {
  check_usable(label);
  if (producer == nullptr) producer = cuda::current_stream();
  auto request = std::make_unique<NcclRequest>(*this, std::move(label));
  CUDA_CHECK(cudaEventRecord(request->ready_event(), producer));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, request->ready_event(), 0));
  CUDA_CHECK(cudaEventRecord(request->start_event(), stream_));
  try {
    NCCL_CHECK(ncclGroupStart());
    collectives();
    settle(NCCL_CHECK(ncclGroupEnd()), request->label());
  } catch (const CommError& e) {
    if (!aborted_) fail(e.what());
    throw;
  }
  CUDA_CHECK(cudaEventRecord(request->done_event(), stream_));
  return request;
}

std::unique_ptr<CommRequest> NcclCommunicator::start_all_reduce_sum_impl(
    std::span<const Tensor> buffers, std::string label, cudaStream_t producer) {
  size_t on_cpu = 0;
  for (const Tensor& t : buffers) on_cpu += t.device == Device::cpu ? 1 : 0;
  if (on_cpu == buffers.size()) return host_->start_all_reduce_sum(buffers, std::move(label));
  if (on_cpu != 0) {
    throw CommError("nccl " + label + ": CPU and GPU buffers in one request; start them apart");
  }
  std::vector<ncclDataType_t> types;
  for (const Tensor& t : buffers) types.push_back(nccl_type(t, label));
  return launch(std::move(label), producer, [&] {
    for (size_t i = 0; i < buffers.size(); ++i) {
      void* data = buffers[i].data;
      NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(buffers[i].numel()), types[i],
                               ncclSum, comm_, stream_));
    }
  });
}

void NcclCommunicator::broadcast_impl(const Tensor& buffer, int root) {
  if (buffer.device == Device::cpu) {
    host_->broadcast(buffer, root);
    return;
  }
  launch("broadcast from rank " + std::to_string(root), nullptr, [&] {
    NCCL_CHECK(
        ncclBroadcast(buffer.data, buffer.data, buffer.bytes(), ncclUint8, root, comm_, stream_));
  })->wait();
}

std::vector<double> NcclCommunicator::all_reduce_host_impl(std::vector<double> values,
                                                           HostReduce op) {
  return host_->all_reduce_host(std::move(values), op);
}

void NcclCommunicator::barrier_impl() {
  host_->barrier();
}

}  // namespace nmt
