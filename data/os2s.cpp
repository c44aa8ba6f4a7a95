// PieceListVocab: OpenSeq2Seq-style vocabulary files and pre-tokenized text.
#include "data/os2s.h"

#include <stdexcept>

#include "data/corpus_text.h"

namespace nmt {

namespace {

constexpr std::string_view kWordStart = "\xE2\x96\x81";  // U+2581, SentencePiece's word start

const char* const kSpecialPieceText[4] = {"<pad>", "<unk>", "<s>", "</s>"};

}  // namespace

int32_t special_id_of_piece(std::string_view piece) {
  // The spellings of SentencePiece, OpenSeq2Seq (SpecialTextTokens) and OpenNMT.
  if (piece == "<pad>" || piece == "<PAD>" || piece == "<blank>") return kPadId;
  if (piece == "<unk>" || piece == "<UNK>") return kUnkId;
  if (piece == "<s>" || piece == "<S>" || piece == "<bos>" || piece == "<BOS>") return kBosId;
  if (piece == "</s>" || piece == "</S>" || piece == "<eos>" || piece == "<EOS>") return kEosId;
  return -1;
}

PieceListVocab::PieceListVocab(const std::vector<std::string>& regular_pieces) {
  for (const char* special : kSpecialPieceText) pieces_.emplace_back(special);
  for (int32_t id = 0; id < kFirstRegularId; ++id) ids_.emplace(pieces_[id], id);
  for (const auto& p : regular_pieces) {
    if (special_id_of_piece(p) >= 0) continue;
    if (!add_piece(p)) throw std::invalid_argument("duplicate vocabulary piece '" + p + "'");
  }
}

bool PieceListVocab::add_piece(std::string piece) {
  if (ids_.find(piece) != ids_.end()) return false;
  if (piece.find(kWordStart) != std::string::npos) word_start_markers_ = true;
  ids_.emplace(piece, static_cast<int32_t>(pieces_.size()));
  pieces_.push_back(std::move(piece));
  return true;
}

PieceListVocab PieceListVocab::load(const std::string& path) {
  TextLines lines(path);
  PieceListVocab vocab(std::vector<std::string>{});
  std::unordered_map<std::string, int64_t> first_line;  // piece -> line, for duplicate messages
  auto cursor = lines.cursor();
  std::string_view line;
  while (cursor.next(line)) {
    const int64_t number = cursor.line_number();
    if (line.empty()) continue;  // OpenSeq2Seq skips empty lines too
    const std::string where = path + ":" + std::to_string(number);
    if (!is_valid_utf8(line)) throw std::runtime_error("vocabulary " + where + ": invalid UTF-8");
    const size_t cut = line.find_first_of(" \t");
    const std::string_view piece = line.substr(0, cut);
    if (piece.empty())
      throw std::runtime_error("vocabulary " + where + ": line starts with a separator, no piece");
    if (special_id_of_piece(piece) >= 0) {
      ++vocab.special_lines_;
      continue;
    }
    std::string text(piece);
    if (!vocab.add_piece(text)) {
      throw std::runtime_error("vocabulary " + where + ": piece '" + text +
                               "' already appears on line " + std::to_string(first_line[text]));
    }
    first_line.emplace(std::move(text), number);
  }
  if (vocab.size() == kFirstRegularId)
    throw std::runtime_error("vocabulary " + path + " has no pieces");
  return vocab;
}

void PieceListVocab::encode(std::string_view text, std::vector<int32_t>& ids) const {
  ids.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t begin = text.find_first_not_of(" \t\r", pos);
    if (begin == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t\r", begin);
    if (end == std::string_view::npos) end = text.size();
    ids.push_back(piece_id(text.substr(begin, end - begin)));
    pos = end;
  }
}

std::string PieceListVocab::decode(std::span<const int32_t> ids) const {
  std::string joined;
  for (int32_t id : ids) {
    if (id == kPadId || id == kBosId || id == kEosId) continue;
    if (!word_start_markers_ && !joined.empty()) joined += ' ';
    joined += piece(id);
  }
  std::string out;
  out.reserve(joined.size());
  if (word_start_markers_) {
    for (size_t i = 0; i < joined.size();) {
      if (joined.compare(i, kWordStart.size(), kWordStart) == 0) {
        if (!out.empty()) out += ' ';
        i += kWordStart.size();
      } else {
        out += joined[i++];
      }
    }
    return out;
  }
  for (size_t i = 0; i < joined.size();) {
    if (joined.compare(i, 3, "@@ ") == 0) {
      i += 3;
    } else if (i + 2 == joined.size() && joined.compare(i, 2, "@@") == 0) {
      i += 2;
    } else {
      out += joined[i++];
    }
  }
  return out;
}

std::string PieceListVocab::piece(int32_t id) const {
  if (id < 0 || id >= size()) throw std::out_of_range("vocab id " + std::to_string(id));
  return pieces_[id];
}

int32_t PieceListVocab::piece_id(std::string_view piece) const {
  const auto it = ids_.find(piece);
  return it == ids_.end() ? kUnkId : it->second;
}

std::string PieceListVocab::to_text() const {
  std::string text;
  for (const auto& p : pieces_) {
    text += p;
    text += '\n';
  }
  return text;
}

}  // namespace nmt
