// The nmt-prep pipeline: validate raw parallel text, build or load the vocabulary, encode train and
// dev into shards, and report what was kept and dropped (report.json). apps/nmt-prep is its CLI.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "data/vocab.h"

namespace nmt {

struct PrepOptions {
  std::string train_source;  // one segment per line, paired line by line with train_target
  std::string train_target;
  std::string dev_source;  // optional: both dev files or neither
  std::string dev_target;
  std::string out_dir;  // created if missing; receives spm.model|vocab.txt, *.shard, report.json
  // Empty: train a joint SentencePiece BPE model on train source + target. "*.model": encode raw
  // text with that SentencePiece model. Anything else: a piece list (OpenSeq2Seq style), and the
  // inputs are pre-tokenized pieces separated by spaces.
  std::string vocab_path;
  SentencePieceTrainOptions spm;
  int64_t max_length = 256;  // tokens per side of a train pair; longer pairs are dropped; 0 = off
  double max_ratio = 3.0;    // longer side / shorter side in tokens; above: dropped; 0 = off
  int threads = 0;           // encoding and SentencePiece threads; 0 = all cores
  std::ostream* progress = nullptr;  // stage messages, when set
  // Inside the long phases, a progress line (encoding) or a heartbeat (SentencePiece training)
  // at most this often.
  double progress_interval_seconds = 10;
};

// Pairs counted once each, under the first reason that applies (in this order).
struct DropCounts {
  int64_t invalid_utf8 = 0;
  int64_t empty = 0;         // a side is blank (or encodes to no tokens)
  int64_t too_long = 0;      // a side has more than max_length tokens
  int64_t length_ratio = 0;  // longer/shorter token count above max_ratio
  int64_t total() const { return invalid_utf8 + empty + too_long + length_ratio; }
};

struct SideReport {
  std::string text_file;   // input path
  std::string shard_file;  // output file name inside out_dir
  int64_t tokens = 0;      // ids written (kept pairs)
  int64_t bytes = 0;       // UTF-8 bytes of the kept lines, newlines excluded
  int64_t unk_tokens = 0;  // ids equal to kUnkId
  int64_t max_length = 0;  // longest kept sequence in tokens
  uint64_t shard_bytes = 0;
};

struct SplitReport {
  std::string name;  // "train" or "dev"
  int64_t pairs_read = 0;
  int64_t pairs_kept = 0;
  DropCounts dropped;  // train: removed; dev: always zero (dev keeps every line, see flagged)
  DropCounts flagged;  // dev: lines kept despite the reason (invalid UTF-8 repaired to U+FFFD)
  SideReport source;
  SideReport target;
};

struct PrepReport {
  std::string vocab_kind;  // "sentencepiece" or "pieces"
  std::string vocab_file;  // "spm.model" or "vocab.txt" inside out_dir
  int64_t vocab_size = 0;
  uint64_t vocab_fingerprint = 0;
  PrepOptions options;
  SplitReport train;
  std::optional<SplitReport> dev;
  double seconds_vocab = 0;
  double seconds_encode = 0;
  double seconds_total = 0;
};

// Runs the whole pipeline. Throws std::runtime_error / std::invalid_argument with one message
// naming the offending file or option; on failure no output file of this run is left behind.
PrepReport run_prep(const PrepOptions& options);

nlohmann::ordered_json report_to_json(const PrepReport& report);
// A human-readable table of the report.
std::string format_report(const PrepReport& report);

}  // namespace nmt
