// Raw parallel text: line access to memory-mapped UTF-8 files, UTF-8 validation and repair, and the
// alignment check between the source and target file of a split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/corpus_io.h"

namespace nmt {

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Copy of `text` with every ill-formed byte sequence replaced by U+FFFD.
std::string repair_utf8(std::string_view text);

// True when the line holds nothing but ASCII whitespace.
bool is_blank(std::string_view line);

// One text file, one segment per line. Lines end at '\n'; a trailing '\r' and a UTF-8 byte order
// mark at the start of the file are not part of any line; a last line without '\n' still counts.
class TextLines {
 public:
  explicit TextLines(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint64_t bytes() const { return file_.size(); }
  int64_t line_count() const;  // counted once, then cached

  // Sequential reading: next() returns false after the last line.
  class Cursor {
   public:
    explicit Cursor(const TextLines& lines);
    bool next(std::string_view& line);
    int64_t line_number() const { return line_number_; }  // 1-based number of the last line read

   private:
    const char* pos_;
    const char* end_;
    int64_t line_number_ = 0;
  };
  Cursor cursor() const { return Cursor(*this); }

 private:
  friend class Cursor;
  const char* text_begin() const;  // after a byte order mark
  MappedFile file_;
  mutable int64_t line_count_ = -1;
};

// Throws std::runtime_error naming both files and their line counts when they differ.
void require_same_line_count(const TextLines& source, const TextLines& target);

}  // namespace nmt
