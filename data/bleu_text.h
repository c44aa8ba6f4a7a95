// Text primitives for BLEU and chrF with Python str semantics, so that scores match sacreBLEU:
// strict UTF-8 decoding, str.split()/rstrip() whitespace, str.lower(), general category classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nmt::bleu_text {

// Decodes UTF-8 into code points, rejecting what Python's strict decoder rejects (overlong forms,
// surrogates, code points above U+10FFFF, truncated sequences). Returns false on invalid input
// with the offending byte offset in bad_offset.
bool try_decode_utf8(std::string_view bytes, std::u32string& out, size_t& bad_offset);

// The same, throwing std::invalid_argument "<where>: invalid UTF-8 at byte N" (N from 1).
std::u32string decode_utf8(std::string_view bytes, std::string_view where);

std::string encode_utf8(std::u32string_view text);

// Python str.isspace(): the separators of str.split() and what str.rstrip() removes.
bool is_python_space(char32_t c);

// Whitespace-separated pieces of text, as Python's str.split() with no argument.
std::vector<std::u32string_view> python_split(std::u32string_view text);

// text without trailing whitespace, as Python's str.rstrip().
std::u32string_view python_rstrip(std::u32string_view text);

// Python str.lower(): full lowercase mapping (U+0130 becomes two code points) and the Final_Sigma
// rule (a capital sigma ending a word becomes U+03C2).
std::u32string python_lower(std::u32string_view text);

enum class CategoryClass : uint8_t { kOther = 0, kPunctuation = 1, kSymbol = 2, kNumber = 3 };

// The general category class of c: P* (punctuation), S* (symbol), N* (number) or other.
CategoryClass category_class(char32_t c);

// Tokens joined by single spaces, with the span of each token: n-grams of consecutive tokens are
// then substrings of `text`, usable as hash keys without building new strings.
struct JoinedTokens {
  std::u32string text;
  std::vector<size_t> starts;  // [tokens] offset of each token in text
  std::vector<size_t> ends;    // [tokens] one past its last code point

  size_t size() const { return starts.size(); }
  // Tokens first .. first + count - 1 as one view (they are separated by single spaces).
  std::u32string_view span(size_t first, size_t count) const {
    return std::u32string_view(text).substr(starts[first], ends[first + count - 1] - starts[first]);
  }
};

JoinedTokens join_tokens(const std::vector<std::u32string_view>& tokens);

// value with `decimals` digits after the point, rounded like Python's f"{value:.{decimals}f}".
std::string format_fixed(double value, int decimals);

}  // namespace nmt::bleu_text
