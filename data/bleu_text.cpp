// Python-compatible text primitives for BLEU/chrF; the Unicode facts come from the generated
// data/unicode_tables.h (see scripts/gen_unicode_tables.py for their source and version).
#include "data/bleu_text.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include "data/unicode_tables.h"

namespace nmt::bleu_text {
namespace {

namespace tables = nmt::unicode_tables;

constexpr char32_t kCapitalSigma = 0x03A3;
constexpr char32_t kSmallSigma = 0x03C3;
constexpr char32_t kFinalSigma = 0x03C2;
constexpr char32_t kCapitalIWithDot = 0x0130;
constexpr char32_t kCombiningDotAbove = 0x0307;

// The run of a sorted run table that contains c, or nullptr.
template <typename Run, size_t N>
const Run* find_run(const Run (&runs)[N], char32_t c) {
  const Run* after =
      std::upper_bound(std::begin(runs), std::end(runs), c,
                       [](char32_t value, const Run& run) { return value < run.first; });
  if (after == std::begin(runs)) return nullptr;
  const Run* run = after - 1;
  return c <= run->last ? run : nullptr;
}

bool is_cased(char32_t c) {
  return find_run(tables::kCasedRuns, c) != nullptr;
}
bool is_case_ignorable(char32_t c) {
  return find_run(tables::kCaseIgnorableRuns, c) != nullptr;
}

char32_t lower_one(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const tables::LowercaseRun* run = find_run(tables::kLowercaseRuns, c);
  if (run == nullptr || (c - run->first) % run->stride != 0) return c;
  return static_cast<char32_t>(static_cast<int32_t>(c) + run->delta);
}

// CPython's Final_Sigma test: a cased letter before (skipping case-ignorables) and no cased
// letter after (skipping case-ignorables). It looks at the original, not the lowered, text.
bool is_final_sigma(std::u32string_view text, size_t at) {
  size_t before = at;
  while (before > 0 && is_case_ignorable(text[before - 1])) --before;
  if (before == 0 || !is_cased(text[before - 1])) return false;
  size_t after = at + 1;
  while (after < text.size() && is_case_ignorable(text[after])) ++after;
  return after == text.size() || !is_cased(text[after]);
}

}  // namespace

bool try_decode_utf8(std::string_view bytes, std::u32string& out, size_t& bad_offset) {
  out.clear();
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      out.push_back(lead);
      ++i;
      continue;
    }
    int length = 0;
    char32_t code = 0;
    char32_t minimum = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, code = lead & 0x1F, minimum = 0x80;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3, code = lead & 0x0F, minimum = 0x800;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, code = lead & 0x07, minimum = 0x10000;
    } else {
      bad_offset = i;
      return false;
    }
    if (i + length > bytes.size()) {
      bad_offset = i;
      return false;
    }
    for (int k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(bytes[i + k]);
      if ((next & 0xC0) != 0x80) {
        bad_offset = i;
        return false;
      }
      code = (code << 6) | (next & 0x3F);
    }
    if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      bad_offset = i;
      return false;
    }
    out.push_back(code);
    i += length;
  }
  return true;
}

std::u32string decode_utf8(std::string_view bytes, std::string_view where) {
  std::u32string out;
  size_t bad_offset = 0;
  if (!try_decode_utf8(bytes, out, bad_offset)) {
    throw std::invalid_argument(std::string(where) + ": invalid UTF-8 at byte " +
                                std::to_string(bad_offset + 1));
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool is_python_space(char32_t c) {
  if (c == ' ') return true;
  if (c > 0x3000 || (c > ' ' && c < 0x85)) return false;
  return std::binary_search(std::begin(tables::kWhitespace), std::end(tables::kWhitespace), c);
}

std::vector<std::u32string_view> python_split(std::u32string_view text) {
  std::vector<std::u32string_view> pieces;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_python_space(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_python_space(text[i])) ++i;
    if (i > start) pieces.push_back(text.substr(start, i - start));
  }
  return pieces;
}

std::u32string_view python_rstrip(std::u32string_view text) {
  size_t end = text.size();
  while (end > 0 && is_python_space(text[end - 1])) --end;
  return text.substr(0, end);
}

std::u32string python_lower(std::u32string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == kCapitalSigma) {
      out.push_back(is_final_sigma(text, i) ? kFinalSigma : kSmallSigma);
    } else if (c == kCapitalIWithDot) {
      out.push_back(U'i');
      out.push_back(kCombiningDotAbove);
    } else {
      out.push_back(lower_one(c));
    }
  }
  return out;
}

CategoryClass category_class(char32_t c) {
  // Letters, digits and spaces skip the table search: they are most of every line.
  if (c >= '0' && c <= '9') return CategoryClass::kNumber;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c <= ' ') return CategoryClass::kOther;
  const tables::ClassRun* run = find_run(tables::kCategoryClassRuns, c);
  return run == nullptr ? CategoryClass::kOther : static_cast<CategoryClass>(run->category_class);
}

JoinedTokens join_tokens(const std::vector<std::u32string_view>& tokens) {
  JoinedTokens joined;
  joined.starts.reserve(tokens.size());
  joined.ends.reserve(tokens.size());
  for (std::u32string_view token : tokens) {
    if (!joined.starts.empty()) joined.text.push_back(U' ');
    joined.starts.push_back(joined.text.size());
    joined.text.append(token);
    joined.ends.push_back(joined.text.size());
  }
  return joined;
}

std::string format_fixed(double value, int decimals) {
  // glibc's printf rounds the exact binary value half-to-even, as Python's format does.
  char buffer[64];
  const int length = std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  if (length < 0 || length >= static_cast<int>(sizeof(buffer))) return std::to_string(value);
  return std::string(buffer, length);
}

}  // namespace nmt::bleu_text
