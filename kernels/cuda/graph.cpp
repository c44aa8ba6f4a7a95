// CapturedGraph: stream capture, instantiation, launch and destruction of one CUDA graph.
#include "kernels/cuda/graph.h"

#include <stdexcept>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda {
namespace {

// Ends a capture that is being abandoned (its work threw) and drops whatever it recorded. Errors
// are cleared, not reported: the caller is already throwing the reason.
void abandon_capture(cudaStream_t stream) noexcept {
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial != nullptr)
    cudaGraphDestroy(partial);
  (void)cudaGetLastError();
}

}  // namespace

CapturedGraph::~CapturedGraph() {
  destroy();
}

CapturedGraph::CapturedGraph(CapturedGraph&& other) noexcept
    : exec_(std::exchange(other.exec_, nullptr)), nodes_(std::exchange(other.nodes_, 0)) {}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& other) noexcept {
  if (this != &other) {
    destroy();
    exec_ = std::exchange(other.exec_, nullptr);
    nodes_ = std::exchange(other.nodes_, 0);
  }
  return *this;
}

void CapturedGraph::destroy() noexcept {
  // At process exit the runtime may already be gone; the error is deliberately ignored.
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  nodes_ = 0;
}

CapturedGraph CapturedGraph::capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  SegmentedCapture capture(stream);
  enqueue();
  return capture.finish();
}

void CapturedGraph::launch(cudaStream_t stream) const {
  if (exec_ == nullptr) throw std::logic_error("CapturedGraph::launch: no graph was captured");
  if (nodes_ > 0) CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

void CapturedGraph::upload(cudaStream_t stream) const {
  if (exec_ == nullptr) throw std::logic_error("CapturedGraph::upload: no graph was captured");
  if (nodes_ > 0) CUDA_CHECK(cudaGraphUpload(exec_, stream));
}

SegmentedCapture::SegmentedCapture(cudaStream_t stream)
    : stream_(stream), previous_(current_stream()) {
  if (stream == nullptr)
    throw std::invalid_argument(
        "CapturedGraph::capture: the legacy default stream cannot be captured; use a stream "
        "created with cudaStreamNonBlocking");
  // Thread-local mode: an unsafe call (cudaMalloc, a synchronisation) from this thread fails the
  // capture loudly; other threads (a GPU monitor, say) are not affected.
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  set_current_stream(stream);
}

SegmentedCapture::~SegmentedCapture() {
  if (capturing_) abandon_capture(stream_);
  set_current_stream(previous_);
}

CapturedGraph SegmentedCapture::end() {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess) {
    // cudaErrorStreamCaptureInvalidated: an op inside did something a graph cannot hold.
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw_cuda_error(cudaGetErrorString(ended), "cudaStreamEndCapture", __FILE__, __LINE__);
  }
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph is independent of it
  check_cuda(status, "cudaGraphGetNodes / cudaGraphInstantiate", __FILE__, __LINE__);
  return CapturedGraph(exec, nodes);
}

CapturedGraph SegmentedCapture::cut() {
  if (!capturing_) throw std::logic_error("SegmentedCapture::cut: the capture has finished");
  CapturedGraph graph = end();
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  return graph;
}

CapturedGraph SegmentedCapture::finish() {
  if (!capturing_) throw std::logic_error("SegmentedCapture::finish: the capture has finished");
  return end();
}

}  // namespace nmt::cuda
