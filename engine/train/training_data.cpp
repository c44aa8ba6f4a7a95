// TrainingData implementations: the synthetic reversal task and nmt-prep shard directories.
#include "engine/train/training_data.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "data/batcher.h"
#include "data/shard.h"
#include "engine/train/prefetched_data.h"
#include "engine/train/prepared_dir.h"
#include "engine/train/synthetic_reverse.h"
#include "kernels/env_switch.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

// NMT_PREFETCH_DATA=0: make_training_data returns the source unwrapped, each batch built when the
// trainer asks for it.
EnvSwitch prefetch_data_switch("NMT_PREFETCH_DATA", /*default_on=*/true);

class SyntheticData : public TrainingData {
 public:
  SyntheticData(const RunConfig& cfg, int world_size, int rank)
      : task_(cfg.data, static_cast<uint64_t>(cfg.train.seed), cfg.train.batch_tokens,
              cfg.train.max_sentences, world_size, rank) {}

  int64_t vocab_size() const override { return task_.vocab(); }
  int64_t max_padded_len() const override { return task_.max_padded_len(); }
  Batch next_train() override {
    last_tokens_ = task_.global_tgt_tokens(next_);
    return task_.train_batch(next_++);
  }
  int64_t last_global_tgt_tokens() const override { return last_tokens_; }
  int64_t epoch() const override { return 0; }
  nlohmann::json position() const override { return {{"batch", next_}}; }
  void restore(const nlohmann::json& position) override {
    next_ = position.at("batch").get<int64_t>();
  }
  int64_t dev_pairs() const override { return static_cast<int64_t>(task_.dev_sources().size()); }
  void dev_pair(int64_t i, std::vector<int32_t>& source,
                std::vector<int32_t>& target) const override {
    source = task_.dev_sources().at(static_cast<size_t>(i));
    target.assign(source.rbegin(), source.rend());  // the task: reverse the sequence
  }
  const std::vector<std::string>& dev_references() const override { return empty_; }
  const std::vector<std::string>& dev_sources_text() const override { return empty_; }
  std::string describe() const override {
    return "synthetic:reverse, " + std::to_string(task_.train_pairs()) + " train pairs, " +
           std::to_string(dev_pairs()) + " held-out pairs";
  }

 private:
  SyntheticReverse task_;
  int64_t next_ = 0;
  int64_t last_tokens_ = 0;
  std::vector<std::string> empty_;
};

std::vector<std::string> read_lines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class CorpusData : public TrainingData {
 public:
  CorpusData(const RunConfig& cfg, int world_size, int rank) {
    fs::path dir = cfg.data.train;
    nlohmann::json report = read_prep_report(dir);
    std::string vocab_file = prep_report_string(report, dir, {"vocab", "file"});
    vocab_path_ = (dir / vocab_file).string();
    vocab_ = load_vocab(vocab_path_);
    train_ = std::make_unique<ShardCorpus>((dir / "train.src.shard").string(),
                                           (dir / "train.tgt.shard").string());
    // By fingerprint: another SentencePiece model of the same size would train on wrong pieces.
    for (const Shard* shard : {&train_->source_shard(), &train_->target_shard()})
      check_shard_vocabulary(*shard, *vocab_, vocab_path_,
                             "the directory mixes two nmt-prep runs; run nmt-prep again");
    TokenBatcherOptions o;
    o.max_tokens = cfg.train.batch_tokens;
    o.max_sentences = cfg.train.max_sentences;
    o.window = std::max<int64_t>(cfg.train.bucket_window, 1) *
               std::max<int64_t>(cfg.train.batch_tokens / 16, 1);
    o.seed = static_cast<uint64_t>(cfg.train.seed);
    o.pad_multiple = kPadMultiple;
    o.max_src_len = cfg.data.max_src_len;
    o.max_tgt_len = cfg.data.max_tgt_len;
    o.length_policy = cfg.data.length_policy;
    o.world_size = world_size;
    o.rank = rank;
    batcher_ = std::make_unique<TokenBatcher>(*train_, o);
    max_len_ = widest_padded_pair(cfg.data.max_src_len, cfg.data.max_tgt_len);
    if (!cfg.data.dev.empty()) load_dev(cfg.data.dev);
    description_ = dir.string() + ": " + std::to_string(train_->size()) + " train pairs (" +
                   std::to_string(batcher_->stats().usable) + " usable), vocabulary " +
                   std::to_string(vocab_->size()) + " (" + vocab_file + ")";
  }

  int64_t vocab_size() const override { return vocab_->size(); }
  int64_t max_padded_len() const override { return max_len_; }
  Batch next_train() override { return batcher_->next(); }
  int64_t last_global_tgt_tokens() const override { return batcher_->last_global().tgt_tokens; }
  int64_t epoch() const override { return batcher_->epoch(); }
  nlohmann::json position() const override { return batcher_->position(); }
  void restore(const nlohmann::json& position) override {
    batcher_->restore(position.get<BatcherPosition>());
  }
  int64_t dev_pairs() const override { return dev_ ? dev_->size() : 0; }
  void dev_pair(int64_t i, std::vector<int32_t>& source,
                std::vector<int32_t>& target) const override {
    if (!dev_ || i < 0 || i >= dev_->size())
      throw std::out_of_range("dev pair " + std::to_string(i) + " of " +
                              std::to_string(dev_pairs()));
    dev_->source(i, source);
    dev_->target(i, target);
  }
  const Vocab* vocab() const override { return vocab_.get(); }
  const std::vector<std::string>& dev_references() const override { return dev_refs_; }
  const std::vector<std::string>& dev_sources_text() const override { return dev_srcs_; }
  std::string describe() const override { return description_; }

 private:
  // The dev split of an nmt-prep directory; references are the raw target lines it was made
  // from when still readable, else the decoded target shard.
  void load_dev(const fs::path& dir) {
    nlohmann::json report = read_prep_report(dir);
    if (!report.contains("splits") || !report["splits"].is_object() ||
        !report["splits"].contains("dev") || !report["splits"]["dev"].is_object())
      throw std::runtime_error("data.dev: " + dir.string() +
                               " has no dev split (nmt-prep --dev-src/--dev-tgt)");
    dev_ = std::make_unique<ShardCorpus>((dir / "dev.src.shard").string(),
                                         (dir / "dev.tgt.shard").string());
    // Checked at start-up: a dev set of another vocabulary would score a meaningless BLEU, or,
    // with ids beyond the model's vocabulary, fail only at the first evaluation.
    for (const Shard* shard : {&dev_->source_shard(), &dev_->target_shard()})
      check_shard_vocabulary(*shard, *vocab_, vocab_path_,
                             "data.dev must be prepared with the training data's vocabulary "
                             "(nmt-prep --vocab " +
                                 vocab_path_ + ")");
    const auto& split = report["splits"]["dev"];
    auto text_file = [&split](const char* side) {
      bool known = split.contains(side) && split[side].is_object() &&
                   split[side].contains("text_file") && split[side]["text_file"].is_string();
      return known ? split[side]["text_file"].get<std::string>() : std::string();
    };
    dev_refs_ = read_lines(text_file("target"));
    dev_srcs_ = read_lines(text_file("source"));
    std::vector<int32_t> ids;
    if (static_cast<int64_t>(dev_refs_.size()) != dev_->size()) {
      dev_refs_.clear();
      for (int64_t i = 0; i < dev_->size(); ++i) {
        dev_->target(i, ids);
        dev_refs_.push_back(vocab_->decode(ids));
      }
    }
    if (static_cast<int64_t>(dev_srcs_.size()) != dev_->size()) {
      dev_srcs_.clear();
      for (int64_t i = 0; i < dev_->size(); ++i) {
        dev_->source(i, ids);
        dev_srcs_.push_back(vocab_->decode(ids));
      }
    }
  }

  std::string vocab_path_;  // <data.train>/<report.json vocab.file>
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<ShardCorpus> train_, dev_;
  std::unique_ptr<TokenBatcher> batcher_;
  int64_t max_len_ = 0;
  std::vector<std::string> dev_refs_, dev_srcs_;
  std::string description_;
};

}  // namespace

void set_prefetch_data(bool on) {
  prefetch_data_switch.set(on);
}

bool prefetch_data() {
  return prefetch_data_switch.get();
}

std::unique_ptr<TrainingData> make_training_data(const RunConfig& cfg, int world_size, int rank) {
  std::unique_ptr<TrainingData> data;
  if (cfg.data.train_is_synthetic())
    data = std::make_unique<SyntheticData>(cfg, world_size, rank);
  else
    data = std::make_unique<CorpusData>(cfg, world_size, rank);
  if (prefetch_data()) data = std::make_unique<PrefetchedData>(std::move(data));
  return data;
}

}  // namespace nmt
