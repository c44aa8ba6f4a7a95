// FullPrefixDecoder: the StepDecoder that re-runs the whole decoder over every hypothesis' prefix
// at each step (Transformer::decode_last_logits), with the encoder output copied once per
// hypothesis. O(t) decoder positions at step t: the test reference the incremental decoder is
// checked against (BeamSearch's decoder-taking constructor runs beam search through it).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/decode/step_decoder.h"
#include "engine/model/arena.h"
#include "engine/model/transformer.h"

namespace nmt::test {

class FullPrefixDecoder final : public StepDecoder {
 public:
  // The model's plan bounds every batch: rows * max(src_len, prefix length) <= model.max_rows().
  explicit FullPrefixDecoder(Transformer& model);

  void start(const Tensor& memory, const std::vector<int32_t>& source_lengths, int64_t src_len,
             int64_t beam, int64_t positions) override;
  Tensor step(const std::vector<int32_t>& tokens, int64_t position) override;
  void reorder(const std::vector<int32_t>& parents) override;
  int64_t rows() const override { return rows_; }

 private:
  Transformer& model_;
  Arena arena_;
  Buffer memory_;  // [max_rows, d_model]: row r's copy of its source at rows [r * src_len, ...)
  int64_t rows_ = 0, beam_ = 0, src_len_ = 0, positions_ = 0;
  std::vector<std::vector<int32_t>> prefixes_;  // [rows][position + 1] ids, bos first
  std::vector<int32_t> memory_lengths_;         // [rows] real source tokens of each row
  std::vector<int32_t> flat_;                   // [rows * prefix length] decode_last_logits input
};

}  // namespace nmt::test
