// CapturedGraph: the work of a sequence of ops, captured once from a stream into a CUDA graph and
// instantiated, then launched as one unit, at the cost of one launch instead of one per kernel
// (a decoder step at batch 1 is ~185 small kernels, engine/decode/step_graphs.h).
//
// What a graph may hold: device work enqueued on the capturing stream only. A cudaMalloc (scratch
// growing, kernels/cuda/scratch.h), a synchronous copy, a host read of a device value, a stream or
// device synchronisation, or work on the legacy default stream inside the capture is an error
// (thread-local capture mode), and capture() throws. Launch arguments and addresses are frozen: a
// replay reads and writes what the capture did, so whatever changes between replays must be data
// the graph reads from device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace nmt::cuda {

class CapturedGraph {
 public:
  CapturedGraph() = default;  // holds no graph
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&& other) noexcept;
  CapturedGraph& operator=(CapturedGraph&& other) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  // Runs `enqueue` with `stream` as the current stream (kernels/cuda/stream.h) while capturing it,
  // and instantiates what it enqueued; nothing runs on the device. `stream` must be a stream of
  // its own (cudaStreamNonBlocking: capture is illegal on the legacy default stream). Throws
  // std::invalid_argument for the legacy stream, std::runtime_error naming the CUDA error when the
  // capture was invalidated or instantiation failed, or what `enqueue` threw; the capture is ended
  // in every case, so the stream stays usable.
  static CapturedGraph capture(cudaStream_t stream, const std::function<void()>& enqueue);

  // Enqueues one replay of the graph on `stream`, ordered after the work enqueued there before (a
  // graph of no nodes enqueues nothing).
  void launch(cudaStream_t stream) const;

  // Enqueues the graph's upload to the device on `stream` (cudaGraphUpload), so that its first
  // launch costs what later ones do; optional, a launch uploads what was not.
  void upload(cudaStream_t stream) const;

  bool empty() const { return exec_ == nullptr; }
  // The captured graph's nodes (kernels, copies, memsets): what one launch replaces.
  size_t nodes() const { return nodes_; }

 private:
  friend class SegmentedCapture;
  CapturedGraph(cudaGraphExec_t exec, size_t nodes) : exec_(exec), nodes_(nodes) {}
  void destroy() noexcept;

  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

// One stream's work captured as consecutive graphs, cut where the host must act between them (a
// training step whose backward hands finished gradients to the exchange, which a graph does not
// hold: engine/model/train_graphs.h). The constructor begins capturing `stream` and makes it the
// current stream; cut() ends the graph so far and begins the next; finish() ends the last. Nothing
// runs on the device until the graphs are launched, in order. The same rules and errors as
// CapturedGraph::capture; one left unfinished (its work threw) is abandoned by the destructor, so
// the stream stays usable.
class SegmentedCapture {
 public:
  explicit SegmentedCapture(cudaStream_t stream);
  ~SegmentedCapture();
  SegmentedCapture(const SegmentedCapture&) = delete;
  SegmentedCapture& operator=(const SegmentedCapture&) = delete;

  CapturedGraph cut();     // the graph since the last cut (or the start); the capture goes on
  CapturedGraph finish();  // the last graph; the capture is over

 private:
  CapturedGraph end();  // ends the capture and instantiates its graph
  cudaStream_t stream_;
  cudaStream_t previous_;  // the current stream before the constructor
  bool capturing_ = false;
};

}  // namespace nmt::cuda
