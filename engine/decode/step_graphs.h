// StepGraphs: the CUDA graphs of IncrementalDecoder's step (issue 18). At batch 1 a decoder step is
// ~185 small kernels whose launches cost more than their work (~0.9 ms a step); captured once
// into a CUDA graph (kernels/cuda/graph.h) and replayed, a step costs one launch. A graph freezes
// every launch argument, so each is keyed by everything the step's launches depend on (StepKey);
// what changes from step to step (ids, positions, lengths) the step reads from device memory.
// The decoder's work runs on a stream of this class's own while graphs are on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include "kernels/cuda/graph.h"
#include "kernels/cuda/stream.h"
#include "kernels/tensor.h"

namespace nmt {

// Whether new decoders replay their steps from CUDA graphs: yes, unless the environment says
// NMT_DECODE_GRAPHS=0 (read at first use) or set_decode_graphs_default(false) was called.
bool decode_graphs_default();
void set_decode_graphs_default(bool on);

// Everything a step's launches depend on besides what it reads from device memory: the batch's
// shape (grids, cuBLAS products, tensor views) and the decoder's buffer layout (a fingerprint of
// where its cache buffers lie, which IncrementalDecoder::reorder changes when it swaps them).
struct StepKey {
  int64_t rows = 0, sources = 0, beam = 0, src_len = 0, positions = 0;
  uint64_t layout = 0;
  // A reorder's graph (the cache gathers of IncrementalDecoder::reorder): the rows it gathers
  // from, `rows` being those it keeps; 0 for a decoder step.
  int64_t reorder_from = 0;
  bool operator==(const StepKey&) const = default;
};

struct StepGraphCounts {
  int64_t eager = 0;     // run op by op (a key's first time, or too many rows)
  int64_t captures = 0;  // graphs captured and instantiated
  int64_t replays = 0;   // run as one graph launch (each capture's own run included)
};

struct StepGraphStats {
  int64_t eager_steps = 0;   // steps run op by op (a key's first step, or too many rows)
  int64_t captures = 0;      // step graphs captured and instantiated
  int64_t replays = 0;       // steps run as one graph launch (each capture's own step included)
  size_t graph_nodes = 0;    // nodes of the latest step graph (the kernels a launch replaces)
  StepGraphCounts reorders;  // the same for the reorders that run through graphs
  std::string failure;       // why graphs were given up (a capture failed), or empty
};

class StepGraphs {
 public:
  // Graphs pay where launches dominate: at a few rows a step is ~140 launches of tiny kernels, and
  // at a few hundred rows the launches still cost more than the kernels' work. Beam search keeps a
  // step's shape for many steps (BeamSearch's block padding), so a graph is replayed often. Past
  // this many rows the kernels' own work hides the launches.
  static constexpr int64_t kMaxRows = 4096;
  // Instantiated graphs kept (the least recently used dropped first), so decoding many sentence
  // shapes in a long run holds a bounded amount of graph memory. A shape takes up to two step
  // graphs (the caches alternate between two layouts while reorders swap them) and a reorder's.
  static constexpr size_t kMaxGraphs = 16;
  // Whether steps of `rows` rows run from graphs.
  static bool serves(int64_t rows) { return rows <= kMaxRows; }
  // Creates the stream (on the current device).
  StepGraphs();

  cuda::OwnedStream& stream() { return *stream_; }

  // Runs a decoder step (or, key.reorder_from > 0, a reorder's gathers; counted apart in
  // stats().reorders) for a batch of `key`, on the stream (which the caller has made current:
  // cuda::StreamHandoff; everything the step reads from the host is uploaded before). Past
  // kMaxRows rows `step` runs eagerly. Else a key's first step runs `step` eagerly (which also
  // sizes the stream's scratch), the next is captured and launched, later ones replay that graph.
  // With `long_lived` (the first step of a batch, whose shape lasts until a sentence ends) a new
  // key is captured at its first step instead, when reserve_scratch sized the scratch and the
  // stream has run a step already; a shape that a shrinking batch passes through may last one
  // step, and an eager step costs less than a capture that is never replayed.
  // `step` enqueues the step and returns its result, a view into buffers that do not move
  // (remembered with the graph and returned on replays). A capture that fails gives graphs up
  // (stats().failure says why) and runs the step eagerly.
  Tensor run(const StepKey& key, const std::function<Tensor()>& step, bool long_lived = false);

  // Grows the stream's scratch to `bytes` now: the most any step of up to kMaxRows rows takes
  // (the caller's bound). After the stream's first step (which also creates its cuBLAS handles)
  // a new key is then captured at once, without an eager step of its own.
  void reserve_scratch(size_t bytes);
  // Drops every graph (their memory too); the keys seen stay known.
  void clear();

  const StepGraphStats& stats() const { return stats_; }

 private:
  struct Entry {
    StepKey key;
    cuda::CapturedGraph graph;  // empty until the key's second step
    Tensor result;
  };

  // Runs `step` op by op and counts it in `eager_count`.
  Tensor eager(const std::function<Tensor()>& step, int64_t& eager_count);
  // The entry of `key`, moved to the front (most recently used), or nullptr.
  Entry* find(const StepKey& key);
  // Graphs captured with the stream's old scratch address are dropped once the scratch has grown.
  void forget_graphs_if_scratch_moved();

  std::unique_ptr<cuda::OwnedStream> stream_;
  std::list<Entry> entries_;  // at most kMaxGraphs, most recently used first
  const void* scratch_address_ = nullptr;
  bool scratch_reserved_ = false;
  bool stream_warm_ = false;  // a step has run eagerly on the stream (handles created)
  StepGraphStats stats_;
};

}  // namespace nmt
