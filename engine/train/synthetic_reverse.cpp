// SyntheticReverse: deterministic pair generation and batching.
#include "engine/train/synthetic_reverse.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "kernels/philox.h"

namespace nmt {

static constexpr uint32_t kTrainStream = 0x51000001u, kDevStream = 0x51000002u,
                          kBatchStream = 0x51000003u;

static std::vector<int32_t> random_sequence(const RngKey& key, uint64_t index, int64_t min_len,
                                            int64_t max_len, int64_t symbols) {
  uint64_t base = index * 64;
  int64_t len = min_len + static_cast<int64_t>(rng_uniform(key, base) * (max_len - min_len + 1));
  len = std::min(len, max_len);
  std::vector<int32_t> seq(len);
  for (int64_t i = 0; i < len; ++i)
    seq[i] = kFirstRegularId + static_cast<int32_t>(rng_uniform(key, base + 1 + i) * symbols) %
                                   static_cast<int32_t>(symbols);
  return seq;
}

SyntheticReverse::SyntheticReverse(const DataConfig& cfg, uint64_t seed, int64_t batch_tokens,
                                   int64_t max_sentences, int world_size, int rank)
    : cfg_(cfg), seed_(seed), world_size_(world_size), rank_(rank) {
  if (cfg.synthetic_task() != "reverse")
    throw std::invalid_argument("data.train: unknown synthetic task '" + cfg.train +
                                "' (known: synthetic:reverse)");
  if (cfg.synthetic_max_len > 60)
    throw std::invalid_argument("data.synthetic_max_len: at most 60 for synthetic:reverse");
  sentences_per_batch_ = std::max<int64_t>(1, batch_tokens / max_padded_len());
  if (max_sentences > 0) sentences_per_batch_ = std::min(sentences_per_batch_, max_sentences);
  sentences_per_batch_ =
      std::max<int64_t>(world_size, sentences_per_batch_ / world_size * world_size);

  std::set<std::vector<int32_t>> held_out;
  RngKey dev_key{seed, 0, kDevStream};
  for (uint64_t i = 0; static_cast<int64_t>(dev_src_.size()) < cfg.synthetic_dev_pairs; ++i) {
    auto s = random_sequence(dev_key, i, cfg.synthetic_min_len, cfg.synthetic_max_len,
                             cfg.synthetic_vocab);
    if (held_out.insert(s).second) dev_src_.push_back(std::move(s));
    if (i > static_cast<uint64_t>(cfg.synthetic_dev_pairs) * 100)
      throw std::invalid_argument(
          "data.synthetic_dev_pairs: more than the task has distinct sequences");
  }
  RngKey train_key{seed, 0, kTrainStream};
  for (uint64_t i = 0; static_cast<int64_t>(train_.size()) < cfg.synthetic_train_pairs; ++i) {
    auto s = random_sequence(train_key, i, cfg.synthetic_min_len, cfg.synthetic_max_len,
                             cfg.synthetic_vocab);
    if (!held_out.count(s)) train_.push_back(std::move(s));
    if (i > static_cast<uint64_t>(cfg.synthetic_train_pairs) * 100)
      throw std::invalid_argument(
          "data.synthetic_train_pairs: too many for the task's sequence space");
  }
}

int64_t SyntheticReverse::vocab() const {
  return kFirstRegularId + cfg_.synthetic_vocab;
}

int64_t SyntheticReverse::max_padded_len() const {
  // Source and target are equally long; the decoder side (one more) is the wider.
  return widest_padded_pair(cfg_.synthetic_max_len, cfg_.synthetic_max_len);
}

static std::vector<int32_t> reversed(const std::vector<int32_t>& s) {
  return {s.rbegin(), s.rend()};
}

int64_t SyntheticReverse::pick(int64_t index, int64_t i) const {
  const RngKey key{seed_, static_cast<uint64_t>(index), kBatchStream};
  const auto chosen = static_cast<int64_t>(rng_uniform(key, static_cast<uint64_t>(i)) *
                                           static_cast<float>(train_.size()));
  return std::min<int64_t>(chosen, static_cast<int64_t>(train_.size()) - 1);
}

Batch SyntheticReverse::train_batch(int64_t index) const {
  int64_t per_rank = sentences_per_batch_ / world_size_;
  std::vector<std::vector<int32_t>> src, tgt;
  std::vector<int64_t> ids;
  for (int64_t i = rank_ * per_rank; i < (rank_ + 1) * per_rank; ++i) {
    const int64_t chosen = pick(index, i);
    src.push_back(train_[chosen]);
    tgt.push_back(reversed(train_[chosen]));
    ids.push_back(chosen);
  }
  Batch batch = make_batch(src, tgt, ids, kPadMultiple);
  add_row_orders(batch);
  return batch;
}

int64_t SyntheticReverse::global_tgt_tokens(int64_t index) const {
  const int64_t sentences = sentences_per_batch_ / world_size_ * world_size_;
  int64_t tokens = 0;
  for (int64_t i = 0; i < sentences; ++i)
    tokens += static_cast<int64_t>(train_[pick(index, i)].size()) + 1;
  return tokens;
}

std::vector<Batch> SyntheticReverse::dev_batches(int64_t sentences) const {
  std::vector<Batch> out;
  for (size_t begin = 0; begin < dev_src_.size(); begin += sentences) {
    size_t end = std::min(dev_src_.size(), begin + static_cast<size_t>(sentences));
    std::vector<std::vector<int32_t>> src, tgt;
    std::vector<int64_t> ids;
    for (size_t i = begin; i < end; ++i) {
      src.push_back(dev_src_[i]);
      tgt.push_back(reversed(dev_src_[i]));
      ids.push_back(static_cast<int64_t>(i));
    }
    out.push_back(make_batch(src, tgt, ids, kPadMultiple));
  }
  return out;
}

}  // namespace nmt
