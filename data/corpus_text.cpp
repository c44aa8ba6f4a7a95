// UTF-8 checks and line reading over memory-mapped text files.
#include "data/corpus_text.h"

#include <cstring>
#include <stdexcept>

namespace nmt {

namespace {

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

// Length of the well-formed UTF-8 sequence starting at p (1..4), or 0 when it is ill-formed.
size_t utf8_sequence_length(const unsigned char* p, size_t left) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return (left >= 2 && is_continuation(p[1])) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3 || !is_continuation(p[2])) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;  // E0: no overlong forms
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;  // ED: no surrogates
    return (p[1] >= lo && p[1] <= hi) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4 || !is_continuation(p[2]) || !is_continuation(p[3])) return 0;
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;  // F0: no overlong forms
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;  // F4: nothing above U+10FFFF
    return (p[1] >= lo && p[1] <= hi) ? 4 : 0;
  }
  return 0;
}

constexpr uint64_t kHighBits = 0x8080808080808080ULL;

}  // namespace

bool is_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t left = text.size();
  while (left > 0) {
    // Most corpus text is ASCII: skip eight plain bytes at a time.
    if (left >= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      if ((word & kHighBits) == 0) {
        p += 8;
        left -= 8;
        continue;
      }
    }
    const size_t n = utf8_sequence_length(p, left);
    if (n == 0) return false;
    p += n;
    left -= n;
  }
  return true;
}

std::string repair_utf8(std::string_view text) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t left = text.size();
  while (left > 0) {
    const size_t n = utf8_sequence_length(p, left);
    if (n == 0) {
      out.append(kReplacement, 3);
      ++p;
      --left;
    } else {
      out.append(reinterpret_cast<const char*>(p), n);
      p += n;
      left -= n;
    }
  }
  return out;
}

bool is_blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\v' && c != '\f') return false;
  return true;
}

TextLines::TextLines(const std::string& path) : file_(path) {}

const char* TextLines::text_begin() const {
  const char* begin = file_.data();
  if (file_.size() >= 3 && std::memcmp(begin, "\xEF\xBB\xBF", 3) == 0) begin += 3;
  return begin;
}

int64_t TextLines::line_count() const {
  if (line_count_ >= 0) return line_count_;
  const char* p = text_begin();
  const char* end = file_.data() + file_.size();
  int64_t count = 0;
  while (p < end) {
    const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
    ++count;
    if (nl == nullptr) break;
    p = static_cast<const char*>(nl) + 1;
  }
  line_count_ = count;
  return count;
}

TextLines::Cursor::Cursor(const TextLines& lines)
    : pos_(lines.file_.size() ? lines.text_begin() : nullptr),
      end_(lines.file_.size() ? lines.file_.data() + lines.file_.size() : nullptr) {}

bool TextLines::Cursor::next(std::string_view& line) {
  if (pos_ >= end_) return false;
  const void* nl = std::memchr(pos_, '\n', static_cast<size_t>(end_ - pos_));
  const char* line_end = nl ? static_cast<const char*>(nl) : end_;
  size_t length = static_cast<size_t>(line_end - pos_);
  if (length > 0 && pos_[length - 1] == '\r') --length;
  line = std::string_view(pos_, length);
  pos_ = nl ? line_end + 1 : end_;
  ++line_number_;
  return true;
}

void require_same_line_count(const TextLines& source, const TextLines& target) {
  const int64_t s = source.line_count();
  const int64_t t = target.line_count();
  if (s != t) {
    throw std::runtime_error("misaligned corpus: " + source.path() + " has " + std::to_string(s) +
                             " lines but " + target.path() + " has " + std::to_string(t) +
                             " lines (the two sides must pair line by line)");
  }
}

}  // namespace nmt
