// The SentencePiece-backed Vocab, vocabulary loading by file name, and the fingerprint.
#include "data/vocab.h"

#include <sentencepiece_processor.h>

#include <stdexcept>

#include "data/corpus_io.h"
#include "data/os2s.h"

namespace nmt {

uint64_t Vocab::fingerprint() const {
  uint64_t state = fnv1a64(kind());
  for (int64_t id = 0; id < size(); ++id) {
    state = fnv1a64(piece(static_cast<int32_t>(id)), state);
    state = fnv1a64("\n", state);
  }
  return state;
}

namespace {

class SentencePieceVocab : public Vocab {
 public:
  SentencePieceVocab(const std::string& model_bytes, const std::string& name) {
    const auto status = processor_.LoadFromSerializedProto(model_bytes);
    if (!status.ok())
      throw std::runtime_error("cannot load SentencePiece model " + name + ": " +
                               status.ToString());
    if (processor_.pad_id() != kPadId || processor_.unk_id() != kUnkId ||
        processor_.bos_id() != kBosId || processor_.eos_id() != kEosId) {
      throw std::runtime_error(
          "SentencePiece model " + name + " has special ids pad=" +
          std::to_string(processor_.pad_id()) + " unk=" + std::to_string(processor_.unk_id()) +
          " bos=" + std::to_string(processor_.bos_id()) +
          " eos=" + std::to_string(processor_.eos_id()) +
          "; this project needs pad=0 unk=1 bos=2 eos=3 (train it with nmt-prep)");
    }
  }

  int64_t size() const override { return processor_.GetPieceSize(); }
  std::string kind() const override { return "sentencepiece"; }

  void encode(std::string_view text, std::vector<int32_t>& ids) const override {
    ids.clear();
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) throw std::runtime_error("SentencePiece encode failed: " + status.ToString());
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::vector<int> kept;
    kept.reserve(ids.size());
    for (int32_t id : ids)
      if (id != kPadId && id != kBosId && id != kEosId) kept.push_back(id);
    std::string text;
    const auto status = processor_.Decode(kept, &text);
    if (!status.ok()) throw std::runtime_error("SentencePiece decode failed: " + status.ToString());
    return text;
  }

  std::string piece(int32_t id) const override {
    if (id < 0 || id >= size()) throw std::out_of_range("vocab id " + std::to_string(id));
    return processor_.IdToPiece(id);
  }

  int32_t piece_id(std::string_view piece) const override { return processor_.PieceToId(piece); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Vocab> sentencepiece_vocab_from_bytes(const std::string& model_bytes,
                                                      const std::string& name) {
  return std::make_unique<SentencePieceVocab>(model_bytes, name);
}

std::unique_ptr<Vocab> load_sentencepiece_vocab(const std::string& path) {
  return sentencepiece_vocab_from_bytes(read_file(path), path);
}

bool is_sentencepiece_model_path(const std::string& path) {
  return path.size() >= 6 && path.compare(path.size() - 6, 6, ".model") == 0;
}

std::unique_ptr<Vocab> load_vocab(const std::string& path) {
  if (is_sentencepiece_model_path(path)) return load_sentencepiece_vocab(path);
  return std::make_unique<PieceListVocab>(PieceListVocab::load(path));
}

}  // namespace nmt
