// Batch: one padded source/target mini-batch of token ids, the unit every data source hands the
// model. Special ids are fixed project-wide (data/special_ids.h).
#pragma once

#include <cstdint>
#include <vector>

#include "data/special_ids.h"

namespace nmt {

// Every padded length is a multiple of this (tensor-core tiles and aligned rows like multiples of
// 8): the project's one padding constant.
inline constexpr int64_t kPadMultiple = 8;

// n rounded up to a multiple of `multiple`.
inline int64_t padded_length(int64_t n, int64_t multiple = kPadMultiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// The widest padded pair of sentences at most max_src_len / max_tgt_len tokens long: the longer of
// the padded source and the padded decoder side (target + 1 for bos in / eos out). The longest
// padded sentence any batch holds, and the model's planned length.
inline int64_t widest_padded_pair(int64_t max_src_len, int64_t max_tgt_len,
                                  int64_t multiple = kPadMultiple) {
  int64_t src = padded_length(max_src_len, multiple),
          tgt = padded_length(max_tgt_len + 1, multiple);
  return src > tgt ? src : tgt;
}

struct Batch {
  int64_t sentences = 0;  // B
  int64_t src_len = 0;    // S: padded source length (a multiple of the batcher's pad_multiple)
  int64_t tgt_len = 0;    // T: padded target length
  std::vector<int32_t> src;          // [B, S] source ids, kPadId after the sentence
  std::vector<int32_t> tgt_in;       // [B, T] decoder input: kBosId, y_1 .. y_n, then kPadId
  std::vector<int32_t> tgt_out;      // [B, T] decoder target: y_1 .. y_n, kEosId, then kPadId
  std::vector<int32_t> src_lengths;  // [B] real source tokens (no padding)
  std::vector<int32_t> tgt_lengths;  // [B] real decoder positions = target tokens + 1 (for eos)
  std::vector<int64_t> ids;          // [B] index of each pair in its corpus (for decoding order)
  // Optional (add_row_orders; training batches have them): src's and tgt_in's rows grouped by id
  // for the embeddings' backward, [2, B * S] and [2, B * T]: the ids in ascending order (kPadId and
  // negative ids as kOrderPadKey, last), then the row each came from, ascending among equal ids.
  // Empty: the model sorts the ids on the device instead. They describe src and tgt_in as they were
  // when add_row_orders ran: whatever changes those ids must call it again (the model checks only
  // the orders' sizes, and stale orders would send gradients to the old ids' rows).
  std::vector<int32_t> src_order;
  std::vector<int32_t> tgt_order;

  int64_t src_tokens() const;  // sum of src_lengths
  int64_t tgt_tokens() const;  // sum of tgt_lengths: the tokens the loss is normalised by
};

// The key of pad (and negative) ids in a Batch's row orders: above every real id, so they sort
// last.
inline constexpr int32_t kOrderPadKey = 0x7fffffff;

// Fills batch.src_order and batch.tgt_order from its ids: a stable counting sort over the ids,
// made where the batch is built (nmt-train builds the next batch while the GPU runs a step), so the
// step need not sort on the device.
void add_row_orders(Batch& batch);

// Builds a padded Batch from unpadded id sequences (no bos/eos in them); lengths are padded up to a
// multiple of pad_multiple (and at least 1). Used by every batch source, synthetic or corpus.
Batch make_batch(const std::vector<std::vector<int32_t>>& sources,
                 const std::vector<std::vector<int32_t>>& targets, const std::vector<int64_t>& ids,
                 int64_t pad_multiple);

}  // namespace nmt
