// StepGraphs: eager first step, capture on the second, replays after; the bounded cache of graphs;
// the process-wide switch (NMT_DECODE_GRAPHS).
#include "engine/decode/step_graphs.h"

#include <exception>
#include <stdexcept>

#include "kernels/cuda/scratch.h"
#include "kernels/env_switch.h"

namespace nmt {

namespace {

EnvSwitch decode_graphs_switch("NMT_DECODE_GRAPHS", /*default_on=*/true);

}  // namespace

bool decode_graphs_default() {
  return decode_graphs_switch.get();
}

void set_decode_graphs_default(bool on) {
  decode_graphs_switch.set(on);
}

StepGraphs::StepGraphs() : stream_(std::make_unique<cuda::OwnedStream>()) {}

StepGraphs::Entry* StepGraphs::find(const StepKey& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->key == key) {
      entries_.splice(entries_.begin(), entries_, it);
      return &entries_.front();
    }
  return nullptr;
}

void StepGraphs::forget_graphs_if_scratch_moved() {
  const void* now = cuda::stream_resources(stream_->get()).scratch_address();
  if (now == scratch_address_) return;
  // The old scratch was freed when it grew: a graph captured with it would write freed memory.
  // The keys stay known: the scratch only grows, so each still fits without an eager step.
  scratch_address_ = now;
  clear();
}

void StepGraphs::clear() {
  for (Entry& entry : entries_) entry.graph = cuda::CapturedGraph();
}

Tensor StepGraphs::eager(const std::function<Tensor()>& step, int64_t& eager_count) {
  Tensor result = step();
  ++eager_count;
  stream_warm_ = true;
  return result;
}

void StepGraphs::reserve_scratch(size_t bytes) {
  cuda::reserve_scratch(stream_->get(), bytes);
  scratch_reserved_ = true;
}

Tensor StepGraphs::run(const StepKey& key, const std::function<Tensor()>& step, bool long_lived) {
  forget_graphs_if_scratch_moved();  // grown by the last eager step, or by any op on the stream
  const bool is_step = key.reorder_from == 0;
  int64_t& eager_count = is_step ? stats_.eager_steps : stats_.reorders.eager;
  int64_t& captures = is_step ? stats_.captures : stats_.reorders.captures;
  int64_t& replays = is_step ? stats_.replays : stats_.reorders.replays;
  const bool graphs = serves(key.rows) && stats_.failure.empty();
  Entry* entry = graphs ? find(key) : nullptr;
  if (entry == nullptr && graphs && long_lived && scratch_reserved_ && stream_warm_) {
    entries_.push_front(Entry{key, cuda::CapturedGraph(), Tensor()});  // captured just below
    if (entries_.size() > kMaxGraphs) entries_.pop_back();
    entry = &entries_.front();
  }
  if (entry == nullptr) {
    Tensor result = eager(step, eager_count);
    if (graphs) {
      entries_.push_front(Entry{key, cuda::CapturedGraph(), result});
      if (entries_.size() > kMaxGraphs) entries_.pop_back();
    }
    return result;
  }
  if (entry->graph.empty()) {
    try {
      entry->graph = cuda::CapturedGraph::capture(stream_->get(), [&] { entry->result = step(); });
    } catch (const std::logic_error&) {
      // A wrong argument of an op (the capture has ended): the step's own error, not the graph's.
      throw;
    } catch (const std::exception& e) {
      // Something in the step cannot be captured: decode on without graphs rather than fail.
      stats_.failure = e.what();
      entries_.clear();
      return eager(step, eager_count);
    }
    ++captures;
    if (is_step) stats_.graph_nodes = entry->graph.nodes();
  }
  entry->graph.launch(stream_->get());
  ++replays;
  return entry->result;
}

}  // namespace nmt
