// TrainGraphs: op by op at a shape's first step and captured behind it (or at its second step),
// replayed after; a bounded cache of graphs, dropped when the stream's scratch moves.
#include "engine/model/train_graphs.h"

#include <exception>
#include <stdexcept>

#include "kernels/cuda/scratch.h"
#include "kernels/env_switch.h"

namespace nmt {

namespace {

EnvSwitch capture_at_first_sight_switch("NMT_CAPTURE_AT_FIRST_SIGHT", /*default_on=*/true);

}  // namespace

bool capture_at_first_sight() {
  return capture_at_first_sight_switch.get();
}

void set_capture_at_first_sight(bool on) {
  capture_at_first_sight_switch.set(on);
}

TrainGraphs::TrainGraphs() : stream_(std::make_unique<cuda::OwnedStream>()) {}

TrainGraphs::Entry* TrainGraphs::find(const TrainStepKey& key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->key == key) {
      entries_.splice(entries_.begin(), entries_, it);
      return &entries_.front();
    }
  return nullptr;
}

void TrainGraphs::forget_graphs_if_scratch_moved() {
  const cuda::StreamResources& resources = cuda::stream_resources(stream_->get());
  const void* now = resources.scratch_address();
  const void* side_now = resources.side_scratch_address();
  // A side scratch that appears (nullptr before) was used by no captured graph.
  const bool side_moved = side_now != side_scratch_address_ && side_scratch_address_ != nullptr;
  side_scratch_address_ = side_now;
  if (now == scratch_address_ && !side_moved) return;
  // The old scratch was freed when it grew: a graph captured with it would write freed memory.
  // The shapes stay known (the scratch only grows, so each still fits): their next step captures.
  scratch_address_ = now;
  for (Entry& entry : entries_) entry.segments.clear();
}

const TrainGraphs::Cut& TrainGraphs::run_now() {
  static const Cut now = [](const std::function<void()>& after) { after(); };
  return now;
}

std::vector<TrainGraphs::Segment> TrainGraphs::capture(
    const std::function<void(const Cut&)>& step) {
  std::vector<Segment> segments;
  cuda::SegmentedCapture capture(stream_->get());
  step([&](const std::function<void()>& after) { segments.push_back({capture.cut(), after}); });
  segments.push_back({capture.finish(), nullptr});
  return segments;
}

bool TrainGraphs::capture_into(Entry& entry, const std::function<void(const Cut&)>& step) {
  try {
    entry.segments = capture(step);
  } catch (const std::logic_error&) {
    // A wrong argument of an op (the capture has ended): the step's own error, not the graph's.
    throw;
  } catch (const std::exception& e) {
    // Something in the step cannot be captured: train on without graphs rather than fail.
    stats_.failure = e.what();
    entries_.clear();
    return false;
  }
  ++stats_.captures;
  stats_.graph_nodes = 0;
  for (const Segment& segment : entry.segments) stats_.graph_nodes += segment.graph.nodes();
  stats_.graph_segments = entry.segments.size();
  return true;
}

void TrainGraphs::run(const TrainStepKey& key, const std::function<void(const Cut&)>& step) {
  auto op_by_op = [&] {
    step(run_now());
    ++stats_.eager_steps;
  };
  if (!stats_.failure.empty()) return op_by_op();
  forget_graphs_if_scratch_moved();  // grown by the last op-by-op step
  Entry* entry = find(key);
  if (entry == nullptr) {
    op_by_op();
    entries_.push_front(Entry{key, {}});
    if (entries_.size() > kMaxGraphs) {
      entries_.pop_back();
      ++stats_.evictions;
    }
    if (!capture_at_first_sight()) return;
    // The step just enqueued has sized the scratch; record its graph now, while the device runs
    // it (capturing and instantiating are host work), and upload the graph behind it, so that
    // the shape's second step is a plain replay.
    forget_graphs_if_scratch_moved();
    if (capture_into(entries_.front(), step))
      for (const Segment& segment : entries_.front().segments) segment.graph.upload(stream_->get());
    return;
  }
  if (entry->segments.empty() && !capture_into(*entry, step)) return op_by_op();
  for (const Segment& segment : entry->segments) {
    segment.graph.launch(stream_->get());
    if (segment.after) segment.after();
  }
  ++stats_.replays;
}

std::string describe(const TrainGraphStats& g) {
  std::string line = std::to_string(g.replays) + " replayed, " + std::to_string(g.eager_steps) +
                     " op by op, " + std::to_string(g.captures) + " captures of " +
                     std::to_string(g.graph_nodes) + " nodes";
  if (g.graph_segments > 1)
    line += " (the latest in " + std::to_string(g.graph_segments) +
            " segments, cut where the gradient exchange starts a bucket)";
  if (g.overlapped > 0)
    line += ", " + std::to_string(g.overlapped) +
            " op by op because the gradient exchange overlapped backward (dist.overlap)";
  if (g.evictions > 0) line += ", " + std::to_string(g.evictions) + " graphs evicted";
  if (!g.failure.empty()) line += "; given up: " + g.failure;
  return line;
}

}  // namespace nmt
