// EvalBatcher: fixed-order batches for evaluation and decoding.
#include "data/batcher_eval.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace nmt {

namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  n = std::max<int64_t>(n, 1);
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

EvalBatcher::EvalBatcher(const ParallelCorpus& corpus, EvalBatcherOptions options)
    : corpus_(corpus), options_(options) {
  const auto& o = options_;
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw std::invalid_argument("EvalBatcher: rank " + std::to_string(o.rank) +
                                " is outside world_size " + std::to_string(o.world_size));
  if (o.max_tokens < 1 || o.max_sentences < 0 || o.pad_multiple < 1)
    throw std::invalid_argument(
        "EvalBatcher: max_tokens and pad_multiple must be >= 1, max_sentences >= 0");
  const int64_t n = corpus_.size();
  std::vector<int64_t> src(n), tgt(n);
  order_.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    src[i] = corpus_.source_length(i);
    tgt[i] = corpus_.target_length(i) + 1;  // the decoder's extra position
    order_[i] = i;
  }
  if (o.sort_by_length) {
    std::sort(order_.begin(), order_.end(), [&](int64_t a, int64_t b) {
      const int64_t wa = std::max(src[a], tgt[a]), wb = std::max(src[b], tgt[b]);
      if (wa != wb) return wa < wb;
      return a < b;
    });
  }
  batch_begin_.push_back(0);
  int64_t max_src = 0, max_tgt = 0, count = 0;
  for (int64_t p = 0; p < n; ++p) {
    const int64_t i = order_[p];
    const int64_t s = std::max(max_src, src[i]);
    const int64_t t = std::max(max_tgt, tgt[i]);
    const int64_t width = std::max(round_up(s, o.pad_multiple), round_up(t, o.pad_multiple));
    const bool over_budget =
        (count + 1) * width > o.max_tokens || (o.max_sentences > 0 && count + 1 > o.max_sentences);
    if (count > 0 && over_budget) {
      batch_begin_.push_back(p);
      max_src = src[i];
      max_tgt = tgt[i];
      count = 1;
    } else {
      max_src = s;
      max_tgt = t;
      ++count;
    }
  }
  if (count > 0) batch_begin_.push_back(n);
}

int64_t EvalBatcher::batches() const {
  const int64_t total = total_batches();
  const int64_t w = options_.world_size;
  return total / w + (options_.rank < total % w ? 1 : 0);
}

bool EvalBatcher::next(Batch& batch) {
  const int64_t b = cursor_ * options_.world_size + options_.rank;
  if (b >= total_batches()) return false;
  ++cursor_;
  const int64_t begin = batch_begin_[b];
  const int64_t end = batch_begin_[b + 1];
  std::vector<std::vector<int32_t>> sources(end - begin), targets(end - begin);
  std::vector<int64_t> ids(end - begin);
  for (int64_t p = begin; p < end; ++p) {
    const int64_t i = order_[p];
    corpus_.source(i, sources[p - begin]);
    corpus_.target(i, targets[p - begin]);
    ids[p - begin] = i;
  }
  batch = make_batch(sources, targets, ids, options_.pad_multiple);
  return true;
}

}  // namespace nmt
