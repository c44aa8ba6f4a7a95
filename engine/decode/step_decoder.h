// StepDecoder: the decoder as beam search drives it, one target position per call for every live
// hypothesis. IncrementalDecoder (key/value caches, engine/decode/incremental_decoder.h) is the
// engine's; the tests' FullPrefixDecoder (the whole prefix re-run, test/support/decode/) gives the
// same logits at O(length) times the cost.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/tensor.h"

namespace nmt {

class StepDecoder {
 public:
  virtual ~StepDecoder() = default;

  // Begins a batch: `beam` rows per source, row r reading source r / beam, no position decoded.
  // memory: [sources * src_len, d_model] encoder output (compute dtype, the model's device), read
  // during this call only; source_lengths: [sources] real tokens; positions: the most steps any
  // row will take (bos included). Throws std::invalid_argument when the batch exceeds the plan.
  virtual void start(const Tensor& memory, const std::vector<int32_t>& source_lengths,
                     int64_t src_len, int64_t beam, int64_t positions) = 0;

  // Feeds tokens: [rows] ids at `position` (kBosId at 0; positions come in order 0, 1, ...) and
  // returns the logits of the next token, [rows, vocab] in the compute dtype: a view valid until
  // the next call.
  virtual Tensor step(const std::vector<int32_t>& tokens, int64_t position) = 0;

  // After pruning: new row i continues old row parents[i] (parents: [new_rows]). new_rows is a
  // multiple of beam, each block of beam new rows comes from one source, and the sources of the
  // blocks keep their order (finished sources may drop out, none is repeated).
  virtual void reorder(const std::vector<int32_t>& parents) = 0;

  // Rows of the current batch.
  virtual int64_t rows() const = 0;
};

}  // namespace nmt
