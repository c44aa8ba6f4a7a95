// WeightGradQueue: grouping the held-back products by shape into batched launches.
#include "engine/model/weight_grad_queue.h"

#include <stdexcept>

namespace nmt {

void WeightGradQueue::push(const WeightGradProduct& product) {
  if (!enabled_) throw std::logic_error("WeightGradQueue::push: the queue is off");
  queued_.push_back(product);
}

void WeightGradQueue::flush() {
  std::vector<WeightGradProduct> pending;
  pending.swap(queued_);
  last_flushed_ = static_cast<int64_t>(pending.size());
  auto same_kind = [](const WeightGradProduct& a, const WeightGradProduct& b) {
    return a.x.dtype == b.x.dtype && a.x.device == b.x.device && a.x.dim(0) == b.x.dim(0) &&
           a.x.dim(1) == b.x.dim(1) && a.dy.dim(1) == b.dy.dim(1);
  };
  std::vector<bool> done(pending.size(), false);
  for (size_t i = 0; i < pending.size(); ++i) {
    if (done[i]) continue;
    std::vector<WeightGradProduct> batch;
    for (size_t j = i; j < pending.size(); ++j) {
      if (done[j] || !same_kind(pending[i], pending[j])) continue;
      done[j] = true;
      batch.push_back(pending[j]);
      if (batch.size() == static_cast<size_t>(kMaxWeightGradBatch)) {
        linear_weight_grads(batch);
        batch.clear();
      }
    }
    linear_weight_grads(batch);
  }
}

}  // namespace nmt
