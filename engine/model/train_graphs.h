// TrainGraphs: the CUDA graphs of Transformer::forward_backward (issue 14). A base step is ~430
// kernel launches; captured once per batch shape into a CUDA graph (kernels/cuda/graph.h) and
// replayed, it costs one launch, and the host is free for the next batch while the GPU works.
// A graph freezes every launch argument, so each is keyed by everything the step's launches depend
// on besides device memory (TrainStepKey); what changes from step to step (token ids, lengths, the
// dropout step) the step reads from device memory. Token batching already pads both sides to a
// multiple of 8 tokens (data/batch.h), so a run meets a bounded set of shapes and no graph needs
// padding of its own. The step's work runs on a stream of this class's own.
// A step whose backward hands finished gradients to the exchange on the way (Transformer's
// grad-ready hook, dist.overlap) is captured as consecutive graphs, cut where the host starts a
// bucket's all-reduce (a graph holds none): a replay launches each segment and then does what the
// op-by-op step did at that point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/stream.h"

namespace nmt {

// What a training step's launches depend on besides device memory: the batch's shape (grids,
// cuBLAS products, tensor views), the two host scalars the loss takes, and the dropout keys' seed
// and whether dropout is on (StepContext; the step itself is read from device memory).
struct TrainStepKey {
  int64_t sentences = 0, src_len = 0, tgt_len = 0;
  float loss_scale = 1.0f, label_smoothing = 0.0f;
  uint64_t seed = 0;
  bool training = true;
  // Which embedding kernels the step runs (engine/model/transformer.h set_embedding_fused), and
  // whether its backward reads the batch's row orders or sorts on the device.
  bool embedding_fused = true, row_orders = false;
  // Whether the step cuts its graph where it reports finished gradients (a grad-ready hook).
  bool segmented = false;
  bool operator==(const TrainStepKey&) const = default;
};

// Whether a training step's graph is captured right behind its shape's first (op-by-op) step,
// which the device is still running, rather than at the shape's second step, where the device
// waits for the capture (NMT_CAPTURE_AT_FIRST_SIGHT=0: the second). On by default.
bool capture_at_first_sight();
void set_capture_at_first_sight(bool on);

struct TrainGraphStats {
  int64_t eager_steps = 0;  // run op by op: a shape's first step, or after graphs were given up
  int64_t captures = 0;     // graphs captured and instantiated
  int64_t replays = 0;      // steps run as one graph launch (each capture's own step included)
  int64_t evictions = 0;    // graphs dropped to keep at most kMaxGraphs
  int64_t overlapped = 0;   // op by op on the caller's stream: the exchange overlapped backward
  size_t graph_nodes = 0;   // nodes of the latest graph (the launches one replay replaces)
  size_t graph_segments = 0;  // the latest graph's segments (1 unless its step was cut)
  std::string failure;      // why graphs were given up (a capture failed), or empty
};

// One line of what the graphs did: "N replayed, M op by op, K captures of X nodes", with the
// overlapped steps, evictions and a failure when there were any (bench-step's and nmt-train's).
std::string describe(const TrainGraphStats& stats);

class TrainGraphs {
 public:
  // Graphs kept, the least recently used dropped first: a graph of a base step holds ~430 nodes
  // (a few hundred KiB of driver memory), and the Bible run's batches take a few dozen shapes.
  static constexpr size_t kMaxGraphs = 64;

  TrainGraphs();  // creates the stream on the current device

  cuda::OwnedStream& stream() { return *stream_; }

  // Runs one step of `key`, enqueued by `step`, on the stream (which the caller has made current:
  // cuda::StreamHandoff; everything the step reads from the host is uploaded before). A key's
  // first step runs `step` op by op (which also sizes the stream's scratch and tunes its cuBLAS
  // plans) and then, while the device runs it, calls `step` again to capture its graph
  // (capture_at_first_sight(); else its second step is captured and launched); later steps
  // replay that graph. So `step` must enqueue the same work each time it is called for a key, and
  // do nothing else on the host that may not happen twice. A capture that fails gives graphs up
  // (stats().failure says why) and runs the step op by op (unless it ran so already); so do all
  // later steps.
  // `step` gets a Cut: at each point where the host must act before the rest of the step (start
  // an exchange), it calls cut(after). Op by op, `after` runs there and then; in a capture, the
  // graph is cut there and `after` kept, to run after that segment's launch at every replay (the
  // capture's own step included). `after` must do only host work and launches on other streams,
  // and read what it needs when it runs (it outlives the step that captured it).
  using Cut = std::function<void(const std::function<void()>& after)>;
  void run(const TrainStepKey& key, const std::function<void(const Cut&)>& step);
  // A Cut that runs `after` at once (a step run op by op outside run()).
  static const Cut& run_now();

  // Counts a step that ran op by op outside run() because its exchange overlapped backward.
  void count_overlapped() { ++stats_.overlapped; }

  const TrainGraphStats& stats() const { return stats_; }

 private:
  struct Segment {
    cuda::CapturedGraph graph;
    std::function<void()> after;  // what the step's host did at its end (null for the last)
  };
  struct Entry {
    TrainStepKey key;
    std::vector<Segment> segments;  // empty until the key's second step
  };

  // Captures `step` as segments (nothing runs); throws what the capture or `step` threw.
  std::vector<Segment> capture(const std::function<void(const Cut&)>& step);
  // capture() into `entry`, counted in the stats; false when the capture failed (graphs given up:
  // stats().failure, every entry dropped).
  bool capture_into(Entry& entry, const std::function<void(const Cut&)>& step);

  // The entry of `key`, moved to the front (most recently used), or nullptr.
  Entry* find(const TrainStepKey& key);
  // Graphs captured with the old scratch address of the stream (or of its side stream, which runs
  // the weight gradients) are dropped once that scratch has grown.
  void forget_graphs_if_scratch_moved();

  std::unique_ptr<cuda::OwnedStream> stream_;
  std::list<Entry> entries_;  // at most kMaxGraphs, most recently used first
  const void* scratch_address_ = nullptr;
  const void* side_scratch_address_ = nullptr;
  TrainGraphStats stats_;
};

}  // namespace nmt
