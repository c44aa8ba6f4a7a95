// WeightGradQueue: weight-gradient products held back from the layers' backward to the end of the
// model's, then run as few batched launches (linear_weight_grads) instead of one small GEMM each.
//
// Weight gradients have K = the batch's rows and small outputs: the attention blocks' d x d ones
// (every out projection, cross-attention's q) keep an H100 or H200 well under half busy alone
// (bench-kernels --only wgrad-batch: 0.0168 ms alone, 0.0085 a product in a batch of 6 on an
// H200), and even the feed-forward [ffn, d] ones run at ~510 TFLOP/s on an H100. A Transformer-base
// step has 24 of the first kind and 36 larger ones (self-attention's q | k | v, fc1, fc2); held
// back, they go out together once backward is done with the layers, grouped by shape (docs/perf.md,
// session 14: base steps 9.37 -> 8.80 ms on an H100).
//
// Only where nothing reads a layer's gradients before the model's backward ends: the bucketed
// gradient exchange that overlaps backward (Transformer::set_grad_ready_hook) turns it off. What a
// queued product reads (dy, x) must stay unchanged until flush(): the callers keep those operands
// in buffers of their own (Sublayer's branch gradient, AttentionBlock's q or q | k | v gradient,
// FeedForwardBlock's hidden gradient).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/linear.h"

namespace nmt {

// Which weight-gradient products a model plans to hold back (their operands then get buffers of
// their own, Transformer's plan).
enum class QueuedGrads : uint8_t {
  none,
  attention,  // the attention blocks' d x d products: out projections, cross-attention's q
  all,        // those, self-attention's joined q | k | v and the feed-forward fc1 and fc2
};

class WeightGradQueue {
 public:
  // Whether push() may hold products back; off, the callers run their products at once.
  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // Queues dw += dyᵀ x (dy: [rows, out], x: [rows, in], dw: [out, in] f32; linear_weight_grads'
  // rules). Throws std::logic_error when not enabled.
  void push(const WeightGradProduct& product);
  // Runs every queued product, products of one shape and dtype together in batches of at most
  // kMaxWeightGradBatch, in the order they were queued within a shape; leaves the queue empty.
  void flush();
  bool empty() const { return queued_.empty(); }
  // How many products the last flush() ran (tests: that the queue took what it should).
  int64_t last_flushed() const { return last_flushed_; }
  // Drops what is queued without running it (what a backward that threw left behind).
  void clear() { queued_.clear(); }

 private:
  bool enabled_ = false;
  std::vector<WeightGradProduct> queued_;
  int64_t last_flushed_ = 0;
};

}  // namespace nmt
