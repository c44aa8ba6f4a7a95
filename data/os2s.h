// OpenSeq2Seq-style inputs: text already split into pieces (separated by spaces) plus a vocabulary
// file of one piece per line (an optional count or score after a tab or space is ignored), e.g. the
// WMT16 files train.clean.en.shuffled.BPE_common.32K.tok + m_common.vocab. Encoding only looks the
// pieces up: nothing is re-tokenized.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/vocab.h"

namespace nmt {

// Ids: 0..3 are pad, unk, bos, eos whatever the file says; the file's special lines (<pad>, <s>,
// </s>, <unk> and their OpenSeq2Seq/OpenNMT spellings, see docs/data.md) map onto them and are not
// repeated; every other piece follows from id 4 in file order.
class PieceListVocab : public Vocab {
 public:
  // Parses a vocabulary file; throws naming the file and line on a duplicate or empty piece.
  static PieceListVocab load(const std::string& path);
  // A vocabulary of the given regular pieces (ids 4, 5, ... in order).
  explicit PieceListVocab(const std::vector<std::string>& regular_pieces);

  int64_t size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::string kind() const override { return "pieces"; }
  // Splits on spaces and tabs (runs count as one separator); unknown pieces become kUnkId.
  void encode(std::string_view text, std::vector<int32_t>& ids) const override;
  // SentencePiece-style pieces (with U+2581 word starts) are joined and the marker turned into a
  // space; other pieces are joined with spaces and subword-nmt "@@ " continuations are removed.
  std::string decode(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  int32_t piece_id(std::string_view piece) const override;

  // The vocabulary file in this project's id order (<pad> <unk> <s> </s>, then the pieces):
  // load() of it gives back the same ids.
  std::string to_text() const;
  // How many lines of the loaded file were special tokens mapped onto ids 0..3.
  int64_t special_lines() const { return special_lines_; }

 private:
  PieceListVocab() = default;
  // Adds a regular piece; returns false when it is already present.
  bool add_piece(std::string piece);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> pieces_;  // [size] piece text by id
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  bool word_start_markers_ = false;  // some piece contains U+2581 (SentencePiece convention)
  int64_t special_lines_ = 0;
};

// Which fixed special id a vocabulary line names, or -1 for a regular piece.
int32_t special_id_of_piece(std::string_view piece);

}  // namespace nmt
