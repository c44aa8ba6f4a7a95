// The nmt-prep pipeline: text checks, vocabulary, parallel encoding into shards, staged output.
#include "data/prep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "data/corpus_io.h"
#include "data/corpus_text.h"
#include "data/os2s.h"
#include "data/prep_progress.h"
#include "data/prep_publish.h"
#include "data/shard.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

enum class TextVerdict : uint8_t { kOk, kInvalidUtf8, kEmpty };

TextVerdict classify_text(std::string_view source, std::string_view target) {
  if (!is_valid_utf8(source) || !is_valid_utf8(target)) return TextVerdict::kInvalidUtf8;
  if (is_blank(source) || is_blank(target)) return TextVerdict::kEmpty;
  return TextVerdict::kOk;
}

// SentencePiece's training input: both sides of every train pair that passes the text checks.
class CleanTrainLines : public TrainingLineSource {
 public:
  CleanTrainLines(const TextLines& source, const TextLines& target)
      : source_(source.cursor()), target_(target.cursor()) {}
  bool next(std::string& line) override {
    if (has_pending_target_) {
      line.assign(pending_target_);
      has_pending_target_ = false;
      return true;
    }
    std::string_view s, t;
    while (source_.next(s) && target_.next(t)) {
      if (classify_text(s, t) != TextVerdict::kOk) continue;
      line.assign(s);
      pending_target_ = t;
      has_pending_target_ = true;
      return true;
    }
    return false;
  }

 private:
  TextLines::Cursor source_;
  TextLines::Cursor target_;
  std::string_view pending_target_;
  bool has_pending_target_ = false;
};

// A block of pairs encoded in parallel, then written in order.
struct Chunk {
  std::vector<std::string_view> source_text;
  std::vector<std::string_view> target_text;
  std::vector<TextVerdict> verdict;
  std::vector<std::vector<int32_t>> source_ids;
  std::vector<std::vector<int32_t>> target_ids;
  size_t size() const { return source_text.size(); }
};

constexpr size_t kChunkPairs = 16384;

// Encodes every pair whose text passed, or every pair (invalid UTF-8 repaired) when keep_all.
void encode_chunk(const Vocab& vocab, Chunk& chunk, bool keep_all, int threads) {
  const size_t n = chunk.size();
  chunk.verdict.resize(n);
  if (chunk.source_ids.size() < n) {
    chunk.source_ids.resize(n);
    chunk.target_ids.resize(n);
  }
  auto encode_one = [&](std::string_view text, bool repair, std::vector<int32_t>& ids) {
    if (repair)
      vocab.encode(repair_utf8(text), ids);
    else
      vocab.encode(text, ids);
  };
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const TextVerdict v = classify_text(chunk.source_text[i], chunk.target_text[i]);
      chunk.verdict[i] = v;
      chunk.source_ids[i].clear();
      chunk.target_ids[i].clear();
      if (v != TextVerdict::kOk && !keep_all) continue;
      const bool repair = v == TextVerdict::kInvalidUtf8;
      encode_one(chunk.source_text[i], repair, chunk.source_ids[i]);
      encode_one(chunk.target_text[i], repair, chunk.target_ids[i]);
    }
  };
  const size_t workers = std::min<size_t>(std::max(threads, 1), (n + 255) / 256);
  if (workers <= 1) {
    work(0, n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(workers);
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      try {
        work(n * w / workers, n * (w + 1) / workers);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

void add_to_side(SideReport& side, std::string_view text, const std::vector<int32_t>& ids) {
  side.tokens += static_cast<int64_t>(ids.size());
  side.bytes += static_cast<int64_t>(text.size());
  side.max_length = std::max<int64_t>(side.max_length, static_cast<int64_t>(ids.size()));
  for (int32_t id : ids) side.unk_tokens += id == kUnkId;
}

// Encodes one split into <staging>/<name>.src.shard and <name>.tgt.shard. Train drops pairs that
// fail a check; dev (keep_all) keeps every line so decoded output stays aligned with its reference.
SplitReport encode_split(const std::string& name, const TextLines& source, const TextLines& target,
                         const Vocab& vocab, bool keep_all, const PrepOptions& options,
                         const fs::path& staging, int threads) {
  SplitReport report;
  report.name = name;
  report.source.text_file = source.path();
  report.target.text_file = target.path();
  report.source.shard_file = name + ".src.shard";
  report.target.shard_file = name + ".tgt.shard";
  const uint64_t fingerprint = vocab.fingerprint();
  ShardWriter source_out((staging / report.source.shard_file).string(), vocab.size(), fingerprint);
  ShardWriter target_out((staging / report.target.shard_file).string(), vocab.size(), fingerprint);

  auto source_cursor = source.cursor();
  auto target_cursor = target.cursor();
  Chunk chunk;
  bool more = true;
  const auto start = Clock::now();
  auto last_report = start;
  while (more) {
    chunk.source_text.clear();
    chunk.target_text.clear();
    std::string_view s, t;
    while (chunk.size() < kChunkPairs) {
      if (!source_cursor.next(s) || !target_cursor.next(t)) {
        more = false;
        break;
      }
      chunk.source_text.push_back(s);
      chunk.target_text.push_back(t);
    }
    encode_chunk(vocab, chunk, keep_all, threads);
    for (size_t i = 0; i < chunk.size(); ++i) {
      ++report.pairs_read;
      const auto& src_ids = chunk.source_ids[i];
      const auto& tgt_ids = chunk.target_ids[i];
      int64_t DropCounts::*reason = nullptr;
      if (chunk.verdict[i] == TextVerdict::kInvalidUtf8) {
        reason = &DropCounts::invalid_utf8;
      } else if (chunk.verdict[i] == TextVerdict::kEmpty || src_ids.empty() || tgt_ids.empty()) {
        reason = &DropCounts::empty;
      } else {
        const auto shorter = static_cast<double>(std::min(src_ids.size(), tgt_ids.size()));
        const auto longer = static_cast<double>(std::max(src_ids.size(), tgt_ids.size()));
        if (options.max_length > 0 && longer > static_cast<double>(options.max_length))
          reason = &DropCounts::too_long;
        else if (options.max_ratio > 0 && longer / shorter > options.max_ratio)
          reason = &DropCounts::length_ratio;
      }
      if (reason != nullptr) {
        if (!keep_all) {
          ++(report.dropped.*reason);
          continue;
        }
        ++(report.flagged.*reason);
      }
      ++report.pairs_kept;
      source_out.add(src_ids);
      target_out.add(tgt_ids);
      add_to_side(report.source, chunk.source_text[i], src_ids);
      add_to_side(report.target, chunk.target_text[i], tgt_ids);
    }
    if (options.progress != nullptr &&
        seconds_since(last_report) >= options.progress_interval_seconds) {
      *options.progress << format_encode_progress(name, report.pairs_read, source.line_count(),
                                                  seconds_since(start))
                        << std::endl;
      last_report = Clock::now();
    }
  }
  report.source.shard_bytes = source_out.finish();
  report.target.shard_bytes = target_out.finish();
  return report;
}

void validate_options(const PrepOptions& o) {
  if (o.train_source.empty() || o.train_target.empty())
    throw std::invalid_argument("both train files (source and target) are required");
  if (o.dev_source.empty() != o.dev_target.empty())
    throw std::invalid_argument("give both dev files (source and target) or neither");
  if (o.out_dir.empty()) throw std::invalid_argument("an output directory is required");
  if (o.max_length < 0) throw std::invalid_argument("max length must be >= 0 (0 = no limit)");
  if (o.max_ratio != 0 && o.max_ratio < 1)
    throw std::invalid_argument("max ratio must be >= 1 (0 = no limit)");
}

// SentencePiece needs text, and its own message for none is cryptic: say which files lack it.
void require_training_text(const TextLines& source, const TextLines& target) {
  const std::string files = source.path() + " and " + target.path();
  if (source.line_count() == 0) throw std::runtime_error(files + " are empty: no training text");
  std::string line;
  if (!CleanTrainLines(source, target).next(line))
    throw std::runtime_error("no usable train pair in " + files +
                             ": every line is blank or invalid UTF-8 on one side or both");
}

void say(const PrepOptions& o, const std::string& message) {
  if (o.progress != nullptr) *o.progress << "nmt-prep: " << message << std::endl;
}

// Counts the lines SentencePiece has taken (the heartbeat reports it from another thread).
class CountedLines : public TrainingLineSource {
 public:
  explicit CountedLines(TrainingLineSource& lines) : lines_(lines) {}
  bool next(std::string& line) override {
    if (!lines_.next(line)) return false;
    count.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  std::atomic<int64_t> count{0};

 private:
  TrainingLineSource& lines_;
};

// SentencePiece training with a heartbeat (time so far, lines read) on `progress`, and
// SentencePiece's own messages (warnings on stderr, errors) naming nmt-prep's flags.
std::string train_vocabulary(TrainingLineSource& lines, const SentencePieceTrainOptions& spm,
                             const PrepOptions& o) {
  CountedLines counted(lines);
  StderrCapture capture([](const std::string& line) {
    return line.starts_with("nmt-prep") ? line
                                        : "nmt-prep: SentencePiece: " + name_prep_flags(line);
  });
  std::optional<Heartbeat> heartbeat;  // stopped before the capture ends: its lines pass through
  if (o.progress != nullptr)
    heartbeat.emplace(o.progress_interval_seconds, [&](double seconds) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "nmt-prep: SentencePiece still training: %.0f s, %lld lines read", seconds,
                    static_cast<long long>(counted.count.load(std::memory_order_relaxed)));
      *o.progress << line << std::endl;
    });
  try {
    return train_sentencepiece(counted, spm);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(name_prep_flags(e.what()));
  }
}

}  // namespace

PrepReport run_prep(const PrepOptions& options) {
  const auto start = Clock::now();
  validate_options(options);
  const int threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());

  // Inputs are opened and checked before anything is created on disk.
  TextLines train_source(options.train_source);
  TextLines train_target(options.train_target);
  require_same_line_count(train_source, train_target);
  require_training_text(train_source, train_target);
  std::optional<TextLines> dev_source, dev_target;
  if (!options.dev_source.empty()) {
    dev_source.emplace(options.dev_source);
    dev_target.emplace(options.dev_target);
    require_same_line_count(*dev_source, *dev_target);
  }

  PrepReport report;
  report.options = options;
  report.options.progress = nullptr;
  // Built beside out_dir and swapped in whole: never a new vocabulary beside old shards.
  PrepDirPublisher staging(options.out_dir);
  std::unique_ptr<Vocab> vocab;
  if (options.vocab_path.empty()) {
    say(options, "training SentencePiece BPE (vocab " + std::to_string(options.spm.vocab_size) +
                     ") on " + train_source.path() + " + " + train_target.path());
    CleanTrainLines lines(train_source, train_target);
    SentencePieceTrainOptions spm = options.spm;
    spm.threads = threads;
    const std::string model = train_vocabulary(lines, spm, options);
    report.vocab_file = "spm.model";
    write_file_atomically((staging.staging() / report.vocab_file).string(), model);
    vocab = sentencepiece_vocab_from_bytes(model, "trained model");
  } else if (is_sentencepiece_model_path(options.vocab_path)) {
    say(options, "using SentencePiece model " + options.vocab_path);
    const std::string model = read_file(options.vocab_path);
    vocab = sentencepiece_vocab_from_bytes(model, options.vocab_path);
    report.vocab_file = "spm.model";
    write_file_atomically((staging.staging() / report.vocab_file).string(), model);
  } else {
    say(options, "using piece list " + options.vocab_path + " (inputs are pre-tokenized)");
    auto pieces = std::make_unique<PieceListVocab>(PieceListVocab::load(options.vocab_path));
    report.vocab_file = "vocab.txt";
    write_file_atomically((staging.staging() / report.vocab_file).string(), pieces->to_text());
    vocab = std::move(pieces);
  }
  report.vocab_kind = vocab->kind();
  report.vocab_size = vocab->size();
  report.vocab_fingerprint = vocab->fingerprint();
  report.seconds_vocab = seconds_since(start);

  const auto encode_start = Clock::now();
  say(options, "encoding train (" + std::to_string(train_source.line_count()) + " pairs)");
  report.train = encode_split("train", train_source, train_target, *vocab, /*keep_all=*/false,
                              options, staging.staging(), threads);
  if (dev_source) {
    say(options, "encoding dev (" + std::to_string(dev_source->line_count()) + " pairs)");
    report.dev = encode_split("dev", *dev_source, *dev_target, *vocab, /*keep_all=*/true, options,
                              staging.staging(), threads);
  }
  if (report.train.pairs_kept == 0)
    throw std::runtime_error("no train pair of " + train_source.path() + " / " +
                             train_target.path() + " survived the checks (see the drop counts)");
  report.seconds_encode = seconds_since(encode_start);
  report.seconds_total = seconds_since(start);
  write_file_atomically((staging.staging() / "report.json").string(),
                        report_to_json(report).dump(2) + "\n");
  staging.publish();
  return report;
}

}  // namespace nmt
