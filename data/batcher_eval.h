// EvalBatcher: one pass over a dev/test corpus in a fixed order, every pair kept (no drops, no
// truncation), each batch carrying its pairs' corpus indices so outputs can be put back in order.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "data/corpus.h"

namespace nmt {

struct EvalBatcherOptions {
  int64_t max_tokens = 8192;     // sentences * max(padded source, padded decoder length)
  int64_t max_sentences = 1024;  // 0 = no cap
  int64_t pad_multiple = kPadMultiple;
  // Group pairs of like length (less padding, faster decoding); false keeps corpus order.
  bool sort_by_length = true;
  int64_t world_size = 1;  // batch b goes to rank b % world_size
  int64_t rank = 0;
};

class EvalBatcher {
 public:
  // `corpus` must outlive the batcher. A pair wider than max_tokens forms a batch of its own.
  EvalBatcher(const ParallelCorpus& corpus, EvalBatcherOptions options);

  // Fills `batch` with this rank's next batch; false after the last one (until reset()).
  bool next(Batch& batch);
  void reset() { cursor_ = 0; }

  int64_t batches() const;  // this rank's batches per pass
  int64_t total_batches() const { return static_cast<int64_t>(batch_begin_.size()) - 1; }

 private:
  const ParallelCorpus& corpus_;
  EvalBatcherOptions options_;
  std::vector<int64_t> order_;        // [pairs] corpus indices in pass order
  std::vector<int64_t> batch_begin_;  // [batches + 1] start of each batch in order_
  int64_t cursor_ = 0;                // this rank's next batch, counted in this rank's batches
};

}  // namespace nmt
