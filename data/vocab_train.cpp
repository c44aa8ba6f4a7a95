// SentencePiece BPE training through libsentencepiece_train, fed from memory (no input file).
// Uses only API present in both 0.1.97 (Debian 12) and 0.2.0.
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <unordered_map>

#include "data/vocab.h"

namespace nmt {

namespace {

// Adapts our line source to SentencePiece's iterator. An exception from the source must not cross
// SentencePiece's code, so it is parked here, reported as a failed status and rethrown after.
class LineSourceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineSourceIterator(TrainingLineSource& source) : source_(source) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_)
      return {sentencepiece::util::StatusCode::kInternal, "reading training lines failed"};
    return {};
  }
  std::exception_ptr error() const { return error_; }

 private:
  void advance() {
    if (done_) return;
    try {
      done_ = !source_.next(line_);
    } catch (...) {
      error_ = std::current_exception();
      done_ = true;
    }
  }
  TrainingLineSource& source_;
  std::string line_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

std::string train_sentencepiece(TrainingLineSource& lines,
                                const SentencePieceTrainOptions& options) {
  if (options.vocab_size <= kFirstRegularId)
    throw std::invalid_argument("vocabulary size " + std::to_string(options.vocab_size) +
                                " is too small (it must exceed the 4 special pieces)");
  if (options.character_coverage <= 0.0 || options.character_coverage > 1.0)
    throw std::invalid_argument("character coverage must be in (0, 1], got " +
                                std::to_string(options.character_coverage));
  const std::unordered_map<std::string, std::string> kwargs = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", std::to_string(options.character_coverage)},
      {"input_sentence_size", std::to_string(options.input_sentence_size)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(std::max(1, options.threads))},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_piece", "<pad>"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      // INFO (0) is a page of progress per run; WARNING (1) keeps real problems visible.
      {"minloglevel", options.verbose ? "0" : "1"},
  };
  LineSourceIterator iterator(lines);
  std::string model_bytes;
  const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &iterator, &model_bytes);
  if (iterator.error()) std::rethrow_exception(iterator.error());
  if (!status.ok()) throw std::runtime_error("SentencePiece training failed: " + status.ToString());
  return model_bytes;
}

}  // namespace nmt
