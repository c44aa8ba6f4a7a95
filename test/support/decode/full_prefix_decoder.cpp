// FullPrefixDecoder: host-side prefixes, one encoder-output copy per hypothesis, and one full
// decoder pass (Transformer::decode_last_logits) per step.
#include "test/support/decode/full_prefix_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/elementwise.h"
#include "kernels/op_checks.h"

namespace nmt::test {

FullPrefixDecoder::FullPrefixDecoder(Transformer& model)
    : model_(model), arena_(Arena::planner(model.device())) {
  int64_t elements = model.max_rows() * model.shape().d_model;
  DType dtype = model.shape().compute_dtype;
  Arena planner = Arena::planner(model.device());
  planner.allocate("full_prefix.memory", dtype, elements);
  arena_ = Arena(model.device(), planner.used());
  memory_ = arena_.allocate("full_prefix.memory", dtype, elements);
}

void FullPrefixDecoder::start(const Tensor& memory, const std::vector<int32_t>& source_lengths,
                              int64_t src_len, int64_t beam, int64_t positions) {
  const auto sources = static_cast<int64_t>(source_lengths.size());
  const int64_t d = model_.shape().d_model;
  if (sources < 1 || beam < 1 || src_len < 1 || sources * beam * src_len > model_.max_rows())
    throw std::invalid_argument("full-prefix decoder: " + std::to_string(sources) +
                                " sources of length " + std::to_string(src_len) + " x beam " +
                                std::to_string(beam) + " exceed the model's plan (" +
                                std::to_string(model_.max_rows()) + " rows)");
  check_shape("full-prefix decoder", "memory", memory, {sources * src_len, d});
  rows_ = sources * beam;
  beam_ = beam;
  src_len_ = src_len;
  positions_ = positions;
  Tensor slots = memory_.view({rows_ * src_len, d});
  for (int64_t r = 0; r < rows_; ++r) {
    Tensor dst = slots.rows(r * src_len, (r + 1) * src_len);
    copy_tensor(memory.rows((r / beam) * src_len, (r / beam + 1) * src_len), dst);
  }
  prefixes_.assign(static_cast<size_t>(rows_), {});
  memory_lengths_.resize(static_cast<size_t>(rows_));
  for (int64_t r = 0; r < rows_; ++r) memory_lengths_[r] = source_lengths[r / beam];
}

Tensor FullPrefixDecoder::step(const std::vector<int32_t>& tokens, int64_t position) {
  if (static_cast<int64_t>(tokens.size()) != rows_ || position >= positions_)
    throw std::invalid_argument("full-prefix decoder: step " + std::to_string(position) + " with " +
                                std::to_string(tokens.size()) + " tokens for " +
                                std::to_string(rows_) + " rows");
  const int64_t length = position + 1;
  flat_.resize(static_cast<size_t>(rows_ * length));
  for (int64_t r = 0; r < rows_; ++r) {
    std::vector<int32_t>& prefix = prefixes_[r];
    if (static_cast<int64_t>(prefix.size()) != position)
      throw std::invalid_argument("full-prefix decoder: position " + std::to_string(position) +
                                  " out of order");
    prefix.push_back(tokens[r]);
    std::copy(prefix.begin(), prefix.end(), flat_.begin() + r * length);
  }
  return model_.decode_last_logits(memory_.view({rows_ * src_len_, model_.shape().d_model}),
                                   memory_lengths_, src_len_, flat_, rows_, length);
}

void FullPrefixDecoder::reorder(const std::vector<int32_t>& parents) {
  const auto new_rows = static_cast<int64_t>(parents.size());
  const int64_t d = model_.shape().d_model;
  std::vector<std::vector<int32_t>> prefixes(static_cast<size_t>(new_rows));
  std::vector<int32_t> lengths(static_cast<size_t>(new_rows));
  Tensor slots = memory_.view({rows_ * src_len_, d});
  for (int64_t r = 0; r < new_rows; ++r) {
    int32_t parent = parents[r];
    if (parent < 0 || parent >= rows_ || parent / beam_ < r / beam_)
      throw std::invalid_argument("full-prefix decoder: parent " + std::to_string(parent) +
                                  " of row " + std::to_string(r) + " is not a later source's row");
    prefixes[r] = prefixes_[parent];
    lengths[r] = memory_lengths_[parent];
    // The rows of a source share its memory: copy only when a block moves down (sources keep
    // their order, so a block never lands on one still to be read).
    if (r % beam_ == 0 && parent / beam_ != r / beam_) {
      Tensor dst = slots.rows(r * src_len_, (r + beam_) * src_len_);
      int64_t from = (parent / beam_) * beam_;
      copy_tensor(slots.rows(from * src_len_, (from + beam_) * src_len_), dst);
    }
  }
  prefixes_ = std::move(prefixes);
  memory_lengths_ = std::move(lengths);
  rows_ = new_rows;
}

}  // namespace nmt::test
