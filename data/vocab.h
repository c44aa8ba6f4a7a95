// Vocab: text <-> token ids, with the project's fixed special ids (data/special_ids.h). Two kinds:
// a SentencePiece model (raw text in) and a piece list for pre-tokenized text (data/os2s.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/special_ids.h"

namespace nmt {

class Vocab {
 public:
  virtual ~Vocab() = default;
  virtual int64_t size() const = 0;
  // "sentencepiece" (raw text in) or "pieces" (space-separated pieces in).
  virtual std::string kind() const = 0;
  // Replaces `ids` with the ids of one line (no bos/eos added).
  virtual void encode(std::string_view text, std::vector<int32_t>& ids) const = 0;
  // Detokenized text; pad, bos and eos ids are skipped.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;  // [length] token ids
  virtual std::string piece(int32_t id) const = 0;
  // The id of a piece, kUnkId when the vocabulary lacks it.
  virtual int32_t piece_id(std::string_view piece) const = 0;
  // A hash of every piece in id order: shards carry it so a vocabulary/shard mismatch is caught.
  uint64_t fingerprint() const;
};

// The SentencePiece model in `path` (a serialized ModelProto, e.g. spm.model). Throws when the file
// cannot be loaded or its special ids are not pad=0 unk=1 bos=2 eos=3.
std::unique_ptr<Vocab> load_sentencepiece_vocab(const std::string& path);
// The same from the bytes of a model.
std::unique_ptr<Vocab> sentencepiece_vocab_from_bytes(const std::string& model_bytes,
                                                      const std::string& name);

// Loads a vocabulary by file name: "*.model" is a SentencePiece model, anything else a piece list.
std::unique_ptr<Vocab> load_vocab(const std::string& path);
bool is_sentencepiece_model_path(const std::string& path);  // ends in ".model"

struct SentencePieceTrainOptions {
  int64_t vocab_size = 8000;
  double character_coverage = 1.0;        // 1.0 suits alphabetic scripts: no <unk> in train text
  int64_t input_sentence_size = 2000000;  // lines sampled for training; 0 = all
  int threads = 1;
  bool verbose = false;  // SentencePiece's own progress log on stderr
};

// Source of training lines for SentencePiece: returns false when exhausted.
class TrainingLineSource {
 public:
  virtual ~TrainingLineSource() = default;
  virtual bool next(std::string& line) = 0;
};

// Trains a BPE SentencePiece model with the fixed special ids; returns the serialized model bytes.
std::string train_sentencepiece(TrainingLineSource& lines,
                                const SentencePieceTrainOptions& options);

}  // namespace nmt
