// SyntheticReverse: the in-process sequence-reversal task ("data.train": "synthetic:reverse"):
// the target is the source read backwards. Train and held-out pairs are disjoint, and every train
// batch is a pure function of (seed, batch index), so a resumed run sees the same batches.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "engine/config/config.h"

namespace nmt {

class SyntheticReverse {
 public:
  // Batches hold as many sentences as fit batch_tokens at the longest padded length.
  SyntheticReverse(const DataConfig& cfg, uint64_t seed, int64_t batch_tokens,
                   int64_t max_sentences, int world_size = 1, int rank = 0);

  int64_t vocab() const;           // special ids + synthetic symbols
  int64_t max_padded_len() const;  // longest padded sentence of either side
  int64_t train_pairs() const { return static_cast<int64_t>(train_.size()); }

  // This rank's slice of global batch `index` (0-based).
  Batch train_batch(int64_t index) const;
  // Target tokens (each sentence plus its end token) of global batch `index` over all ranks: the
  // count every rank divides its loss by.
  int64_t global_tgt_tokens(int64_t index) const;
  // The held-out pairs in fixed order, in batches of at most `sentences`.
  std::vector<Batch> dev_batches(int64_t sentences) const;
  const std::vector<std::vector<int32_t>>& dev_sources() const { return dev_src_; }

 private:
  // The training pair at position i (over all ranks) of global batch `index`.
  int64_t pick(int64_t index, int64_t i) const;

  DataConfig cfg_;
  uint64_t seed_;
  int64_t sentences_per_batch_;
  int world_size_, rank_;
  std::vector<std::vector<int32_t>> train_, dev_src_;
};

}  // namespace nmt
