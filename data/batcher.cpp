// TokenBatcher: per-epoch schedule (shuffle, window sort, greedy token-budget cut, batch shuffle)
// and the per-rank slice of each global batch.
#include "data/batcher.h"

#include <algorithm>
#include <stdexcept>

namespace nmt {

namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  n = std::max<int64_t>(n, 1);
  return (n + multiple - 1) / multiple * multiple;
}

template <typename T>
void shuffle_in_place(std::vector<T>& items, uint64_t& rng) {
  // Fisher-Yates with our own generator: std::shuffle differs between standard libraries.
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(splitmix64(rng) % i);
    std::swap(items[i - 1], items[j]);
  }
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("TokenBatcher: " + message);
}

}  // namespace

TokenBatcher::TokenBatcher(const ParallelCorpus& corpus, TokenBatcherOptions options)
    : corpus_(corpus), options_(options) {
  const auto& o = options_;
  require(o.world_size >= 1, "world_size must be >= 1");
  require(
      o.rank >= 0 && o.rank < o.world_size,
      "rank " + std::to_string(o.rank) + " is outside world_size " + std::to_string(o.world_size));
  require(o.max_tokens >= 1, "max_tokens must be >= 1");
  require(o.max_sentences >= 0, "max_sentences must be >= 0 (0 = no cap)");
  require(o.window >= 1, "window must be >= 1");
  require(o.pad_multiple >= 1, "pad_multiple must be >= 1");
  require(o.max_src_len >= 1 && o.max_tgt_len >= 1, "max_src_len and max_tgt_len must be >= 1");
  const int64_t widest = widest_padded_pair(o.max_src_len, o.max_tgt_len, o.pad_multiple);
  require(widest <= o.max_tokens,
          "max_tokens " + std::to_string(o.max_tokens) + " cannot hold one pair of max_src_len " +
              std::to_string(o.max_src_len) + " / max_tgt_len " + std::to_string(o.max_tgt_len) +
              " (padded width " + std::to_string(widest) + "); raise max_tokens or lower them");

  const int64_t n = corpus_.size();
  stats_.pairs = n;
  src_len_.resize(n);
  tgt_len_.resize(n);
  usable_.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = corpus_.source_length(i);
    int64_t t = corpus_.target_length(i);
    if (s == 0 || t == 0) {
      ++stats_.dropped_empty;  // an empty source leaves attention nothing to attend to
      continue;
    }
    if (s > o.max_src_len || t > o.max_tgt_len) {
      if (o.length_policy == LengthPolicy::kDrop) {
        ++stats_.dropped_too_long;
        continue;
      }
      ++stats_.truncated;
      s = std::min(s, o.max_src_len);
      t = std::min(t, o.max_tgt_len);
    }
    src_len_[i] = static_cast<int32_t>(s);
    tgt_len_[i] = static_cast<int32_t>(t);
    usable_.push_back(i);
  }
  stats_.usable = static_cast<int64_t>(usable_.size());
  require(stats_.usable >= o.world_size,
          "the corpus has " + std::to_string(stats_.usable) + " usable pairs (of " +
              std::to_string(n) + "), fewer than world_size " + std::to_string(o.world_size));
  epoch_key_ = first_epoch_key(o.seed);
  build_epoch();
}

void TokenBatcher::build_epoch() {
  const auto& o = options_;
  const int64_t world = o.world_size;
  uint64_t rng = epoch_key_;
  std::vector<int64_t> shuffled = usable_;
  shuffle_in_place(shuffled, rng);

  sorted_.clear();
  sorted_.reserve(shuffled.size());
  batches_.clear();
  // The cost of a pair is its wider padded side; sorting by it (ties broken by both lengths, then
  // index, so the order is total) puts pairs of like width together.
  auto width = [&](int64_t i) { return std::max<int64_t>(src_len_[i], tgt_len_[i] + 1); };
  auto shorter = [&](int64_t a, int64_t b) {
    const int64_t wa = width(a), wb = width(b);
    if (wa != wb) return wa < wb;
    if (src_len_[a] != src_len_[b]) return src_len_[a] < src_len_[b];
    if (tgt_len_[a] != tgt_len_[b]) return tgt_len_[a] < tgt_len_[b];
    return a < b;
  };
  std::vector<int64_t> window;
  size_t next = 0;
  while (next < shuffled.size()) {
    // Pairs carried over from the last window (its unfinished batch) join this one.
    const size_t take = std::min<size_t>(static_cast<size_t>(o.window), shuffled.size() - next);
    window.insert(window.end(), shuffled.begin() + static_cast<int64_t>(next),
                  shuffled.begin() + static_cast<int64_t>(next + take));
    next += take;
    std::sort(window.begin(), window.end(), shorter);
    size_t begin = 0;
    while (begin < window.size()) {
      // Grow while every rank's share (ceil(count / world) pairs at the widest padded width) fits.
      int64_t max_src = 0, max_tgt = 0;
      size_t end = begin;
      while (end < window.size()) {
        const int64_t i = window[end];
        const int64_t s = std::max<int64_t>(max_src, src_len_[i]);
        const int64_t t = std::max<int64_t>(max_tgt, tgt_len_[i] + 1);
        const int64_t count = static_cast<int64_t>(end - begin) + 1;
        const int64_t per_rank = (count + world - 1) / world;
        const int64_t padded = std::max(round_up(s, o.pad_multiple), round_up(t, o.pad_multiple));
        if (per_rank * padded > o.max_tokens) break;
        if (o.max_sentences > 0 && per_rank > o.max_sentences) break;
        max_src = s;
        max_tgt = t;
        ++end;
      }
      // A batch cut short by the end of the window waits for the next window to fill it.
      if (end == window.size() && next < shuffled.size()) break;
      // Whole rounds of world_size pairs only, so every rank gets the same number of pairs; the
      // rest starts the next batch (or, at the end of the epoch, is left out of it).
      const int64_t full = static_cast<int64_t>(end - begin) / world * world;
      if (full == 0) break;  // fewer than world_size left: only possible at the epoch's end
      batches_.push_back({static_cast<int64_t>(sorted_.size()), full});
      sorted_.insert(sorted_.end(), window.begin() + static_cast<int64_t>(begin),
                     window.begin() + static_cast<int64_t>(begin) + full);
      begin += static_cast<size_t>(full);
    }
    window.erase(window.begin(), window.begin() + static_cast<int64_t>(begin));
  }
  stats_.epoch_remainder = static_cast<int64_t>(window.size());
  shuffle_in_place(batches_, rng);
}

Batch TokenBatcher::next() {
  const GlobalBatch global = batches_[batch_];
  const int64_t world = options_.world_size;
  const int64_t* pairs = sorted_.data() + global.begin;

  last_global_ = {global.count, 0, 0};
  for (int64_t p = 0; p < global.count; ++p) {
    last_global_.src_tokens += src_len_[pairs[p]];
    last_global_.tgt_tokens += tgt_len_[pairs[p]] + 1;
  }
  // The batch is sorted by width. It is dealt out in rounds of world_size consecutive pairs: in
  // each round the pair with the most tokens goes to the rank holding the fewest so far. Every rank
  // gets the same number of pairs and, in practice, token counts within a percent or two.
  const int64_t per_rank = global.count / world;
  sources_.resize(per_rank);
  targets_.resize(per_rank);
  ids_.resize(per_rank);
  rank_tokens_.assign(world, 0);
  for (int64_t round = 0; round < per_rank; ++round) {
    round_pairs_.assign(pairs + round * world, pairs + (round + 1) * world);
    std::sort(round_pairs_.begin(), round_pairs_.end(), [&](int64_t a, int64_t b) {
      const int64_t ta = src_len_[a] + tgt_len_[a], tb = src_len_[b] + tgt_len_[b];
      return ta != tb ? ta > tb : a < b;
    });
    round_ranks_.resize(world);
    for (int64_t r = 0; r < world; ++r) round_ranks_[r] = r;
    std::sort(round_ranks_.begin(), round_ranks_.end(), [&](int64_t a, int64_t b) {
      return rank_tokens_[a] != rank_tokens_[b] ? rank_tokens_[a] < rank_tokens_[b] : a < b;
    });
    for (int64_t k = 0; k < world; ++k) {
      const int64_t pair = round_pairs_[k];
      rank_tokens_[round_ranks_[k]] += src_len_[pair] + tgt_len_[pair];
      if (round_ranks_[k] != options_.rank) continue;
      corpus_.source(pair, sources_[round]);
      corpus_.target(pair, targets_[round]);
      sources_[round].resize(src_len_[pair]);  // a no-op unless truncating
      targets_[round].resize(tgt_len_[pair]);
      ids_[round] = pair;
    }
  }
  Batch batch = make_batch(sources_, targets_, ids_, options_.pad_multiple);
  add_row_orders(batch);  // here, on nmt-train's prefetch thread, not in the step
  // Roll over right away, so the position always names a batch that exists.
  if (++batch_ == static_cast<int64_t>(batches_.size())) {
    ++epoch_;
    epoch_key_ = next_epoch_key(epoch_key_);
    build_epoch();
    batch_ = 0;
  }
  return batch;
}

BatcherPosition TokenBatcher::position() const {
  return {epoch_, batch_, epoch_key_, stats_.pairs, schedule_hash()};
}

void TokenBatcher::restore(const BatcherPosition& position) {
  if (position.corpus_size != stats_.pairs)
    throw std::runtime_error("batcher position was saved for a corpus of " +
                             std::to_string(position.corpus_size) + " pairs; this corpus has " +
                             std::to_string(stats_.pairs));
  if (position.schedule != schedule_hash())
    throw std::runtime_error(
        "batcher position was saved with different batching options (max_tokens, "
        "max_sentences, window, pad_multiple, max lengths, length policy or world_size); "
        "resuming would not continue the same schedule");
  if (position.epoch < 0 || position.batch < 0)
    throw std::runtime_error("batcher position has a negative epoch or batch");
  epoch_ = position.epoch;
  epoch_key_ = position.rng;
  build_epoch();
  if (position.batch >= static_cast<int64_t>(batches_.size()))
    throw std::runtime_error("batcher position batch " + std::to_string(position.batch) +
                             " is past the epoch's " + std::to_string(batches_.size()) +
                             " batches");
  batch_ = position.batch;
}

}  // namespace nmt
