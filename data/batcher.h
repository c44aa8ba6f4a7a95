// TokenBatcher: length-bucketed, token-budgeted training batches over a ParallelCorpus, one global
// batch per step split evenly over the data-parallel ranks, resumable from a small position.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/batch.h"
#include "data/corpus.h"
#include "data/length_policy.h"

namespace nmt {

LengthPolicy parse_length_policy(std::string_view name);  // "drop" or "truncate"
std::string length_policy_name(LengthPolicy policy);

struct TokenBatcherOptions {
  // Per rank: sentences * max(padded source length, padded decoder length) stays within this.
  int64_t max_tokens = 8192;
  int64_t max_sentences = 1024;  // per rank; 0 = no cap
  // Sentences sorted by length together: many batches' worth, so batches have little padding while
  // the epoch still mixes (windows come from a per-epoch shuffle).
  int64_t window = 65536;
  uint64_t seed = 1;
  int64_t pad_multiple = kPadMultiple;
  int64_t max_src_len = 256;  // source tokens
  int64_t max_tgt_len = 256;  // target tokens; the decoder sees one more (bos in, eos out)
  LengthPolicy length_policy = LengthPolicy::kDrop;
  int64_t world_size = 1;
  int64_t rank = 0;
};

// Where a batcher stands; the same on every rank. Enough to continue with the exact next batch:
// an epoch's schedule is a function of its rng key alone, and the next epoch's key follows from it.
struct BatcherPosition {
  int64_t epoch = 0;
  int64_t batch = 0;        // index of the next global batch within the epoch (always valid)
  uint64_t rng = 0;         // the epoch's shuffle key
  int64_t corpus_size = 0;  // pairs in the corpus, checked on restore
  uint64_t schedule = 0;    // hash of the options that shape the schedule, checked on restore
};
void to_json(nlohmann::json& j, const BatcherPosition& position);
void from_json(const nlohmann::json& j, BatcherPosition& position);  // throws naming a bad key

struct BatcherStats {
  int64_t pairs = 0;             // in the corpus
  int64_t usable = 0;            // pairs in every epoch (after drops)
  int64_t dropped_too_long = 0;  // over max_src_len / max_tgt_len under LengthPolicy::kDrop
  int64_t dropped_empty = 0;     // empty source or target
  int64_t truncated = 0;         // cut to the maximum lengths under LengthPolicy::kTruncate
  // Pairs left out of the current epoch: fewer than world_size were left after the last batch.
  int64_t epoch_remainder = 0;
};

// Totals of the whole global batch (all ranks) last returned: every rank knows them without
// communication, e.g. the target token count the loss is normalised by.
struct GlobalBatchInfo {
  int64_t sentences = 0;
  int64_t src_tokens = 0;
  int64_t tgt_tokens = 0;  // decoder positions: target tokens + 1 per sentence (eos)
};

class TokenBatcher {
 public:
  // `corpus` must outlive the batcher. Throws std::invalid_argument on inconsistent options.
  TokenBatcher(const ParallelCorpus& corpus, TokenBatcherOptions options);

  // This rank's slice of the next global batch. After an epoch's last batch the batcher moves to
  // the next epoch at once (epoch() and batches_per_epoch() then describe the new one).
  Batch next();

  BatcherPosition position() const;
  // Continues from `position` (saved by any rank). Throws when it belongs to a corpus of another
  // size or to different schedule options.
  void restore(const BatcherPosition& position);

  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const { return static_cast<int64_t>(batches_.size()); }
  const BatcherStats& stats() const { return stats_; }
  const GlobalBatchInfo& last_global() const { return last_global_; }
  const TokenBatcherOptions& options() const { return options_; }

 private:
  struct GlobalBatch {
    int64_t begin;  // into sorted_
    int64_t count;  // a multiple of world_size
  };
  void build_epoch();
  uint64_t schedule_hash() const;

  const ParallelCorpus& corpus_;
  TokenBatcherOptions options_;
  BatcherStats stats_;
  std::vector<int32_t> src_len_;      // [pairs] source length after the length policy
  std::vector<int32_t> tgt_len_;      // [pairs] target length after the length policy
  std::vector<int64_t> usable_;       // [usable] pair indices taking part in epochs
  std::vector<int64_t> sorted_;       // [usable] this epoch's pairs, grouped batch by batch
  std::vector<GlobalBatch> batches_;  // this epoch's batches in their shuffled order
  int64_t epoch_ = 0;
  int64_t batch_ = 0;
  uint64_t epoch_key_ = 0;
  GlobalBatchInfo last_global_;
  std::vector<std::vector<int32_t>> sources_;  // reused per batch
  std::vector<std::vector<int32_t>> targets_;
  std::vector<int64_t> ids_;
  std::vector<int64_t> rank_tokens_;  // [world_size] tokens dealt to each rank in this batch
  std::vector<int64_t> round_pairs_;  // [world_size]
  std::vector<int64_t> round_ranks_;  // [world_size]
};

// Deterministic shuffling used by the batchers (the same on every platform and standard library).
uint64_t splitmix64(uint64_t& state);
uint64_t first_epoch_key(uint64_t seed);
uint64_t next_epoch_key(uint64_t key);

}  // namespace nmt
