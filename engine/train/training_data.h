// TrainingData: where nmt-train's batches come from, behind one interface: the synthetic reversal
// task, or an nmt-prep directory (shards + vocabulary) with an optional dev set for loss and BLEU.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/batch.h"
#include "data/vocab.h"
#include "engine/config/config.h"

namespace nmt {

class TrainingData {
 public:
  virtual ~TrainingData() = default;

  virtual int64_t vocab_size() const = 0;
  // The longest padded sentence of either side any batch (train or dev) can hold.
  virtual int64_t max_padded_len() const = 0;
  // This rank's slice of the next global training batch.
  virtual Batch next_train() = 0;
  // Target tokens (decoder positions) of the last global batch over all ranks: the loss divisor.
  virtual int64_t last_global_tgt_tokens() const = 0;
  virtual int64_t epoch() const = 0;
  // Where the training stream stands (for checkpoints), and continuing from there.
  virtual nlohmann::json position() const = 0;
  virtual void restore(const nlohmann::json& position) = 0;

  // The held-out (dev) pairs: one per line of the dev file, in file order, every line kept (an
  // nmt-prep dev split drops nothing). Pair i's source and target ids, no bos/eos, replace the
  // vectors' contents; their lengths are whatever the file holds (no training length limit).
  virtual int64_t dev_pairs() const = 0;
  virtual void dev_pair(int64_t i, std::vector<int32_t>& source,
                        std::vector<int32_t>& target) const = 0;
  // For BLEU: the vocabulary that detokenizes, and the raw reference lines (empty for synthetic).
  virtual const Vocab* vocab() const { return nullptr; }
  virtual const std::vector<std::string>& dev_references() const = 0;
  virtual const std::vector<std::string>& dev_sources_text() const = 0;
  virtual std::string describe() const = 0;
};

// Builds the configured data source for this rank, wrapped in a PrefetchedData (the next training
// batch built on a background thread, engine/train/prefetched_data.h) while prefetch_data() is on.
std::unique_ptr<TrainingData> make_training_data(const RunConfig& cfg, int world_size, int rank);

// On by default; NMT_PREFETCH_DATA=0 in the environment, or set_prefetch_data(false), turns it off
// (make_training_data then returns the source itself: for A/B timing and bisecting).
void set_prefetch_data(bool on);
bool prefetch_data();

}  // namespace nmt
