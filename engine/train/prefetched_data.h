// PrefetchedData: a TrainingData that builds the next training batch on a background thread while
// the caller trains on the one it was handed (one batch ahead, no more). What the caller reads
// after next_train() (global target tokens, epoch, position) is a snapshot taken right after that
// batch was built: what the wrapped source alone would report, so checkpoints and exact resume do
// not see the prefetch. make_training_data wraps every source in one unless NMT_PREFETCH_DATA=0.
#pragma once

#include <future>
#include <memory>
#include <optional>

#include "engine/train/training_data.h"

namespace nmt {

class PrefetchedData : public TrainingData {
 public:
  explicit PrefetchedData(std::unique_ptr<TrainingData> inner);
  // Waits for the prefetch; its batch, or its exception, is dropped.
  ~PrefetchedData() override;
  PrefetchedData(const PrefetchedData&) = delete;
  PrefetchedData& operator=(const PrefetchedData&) = delete;

  int64_t vocab_size() const override;
  int64_t max_padded_len() const override;
  // The batch built ahead (built here the first time and after restore()), then starts building
  // the following one. An exception the inner source threw building this batch is thrown here.
  Batch next_train() override;
  int64_t last_global_tgt_tokens() const override;
  int64_t epoch() const override;
  nlohmann::json position() const override;
  // Drops the batch being built ahead (and its exception) and restores the inner source.
  void restore(const nlohmann::json& position) override;

  int64_t dev_pairs() const override;
  void dev_pair(int64_t i, std::vector<int32_t>& source,
                std::vector<int32_t>& target) const override;
  const Vocab* vocab() const override;
  const std::vector<std::string>& dev_references() const override;
  const std::vector<std::string>& dev_sources_text() const override;
  std::string describe() const override;

 private:
  // The inner source's state right after it built a batch.
  struct State {
    int64_t global_tgt_tokens = 0;
    int64_t epoch = 0;
    nlohmann::json position;
  };
  struct Prepared {
    Batch batch;
    State state;
  };
  static Prepared prepare(TrainingData& inner);  // inner.next_train() and the state after it
  // The inner source once no prefetch runs: the caller's only way to it while one may.
  const TrainingData& settled() const;

  std::unique_ptr<TrainingData> inner_;
  std::future<Prepared> ahead_;  // while valid: the next batch, built on a thread of its own
  std::optional<State> handed_;  // after the batch last handed out; empty before the first
};

}  // namespace nmt
