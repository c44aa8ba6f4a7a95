// sacreBLEU's 13a, intl, none and char tokenizers. Each regular expression there is a one- or
// two-character pattern applied with re.sub, i.e. a left-to-right scan of non-overlapping matches;
// the helpers below perform exactly that scan.
#include "data/bleu_tokenizers.h"

#include <stdexcept>
#include <utility>

#include "data/bleu_text.h"

namespace nmt {
namespace {

using bleu_text::category_class;
using bleu_text::CategoryClass;

// Where the replacement puts spaces around a matched pair (a, b).
enum class PairSpacing {
  kBetweenAndAfter,   // "a b "  (r'\1 \2 ')
  kBeforeAndBetween,  // " a b"  (r' \1 \2')
};

// re.sub of a two-character pattern (first class, second class): after a match the scan resumes
// behind its second character, so "a.." matches only once.
template <typename FirstClass, typename SecondClass>
std::u32string separate_pairs(std::u32string_view text, FirstClass first, SecondClass second,
                              PairSpacing spacing) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 4);
  size_t i = 0;
  while (i < text.size()) {
    if (i + 1 < text.size() && first(text[i]) && second(text[i + 1])) {
      if (spacing == PairSpacing::kBeforeAndBetween) out.push_back(U' ');
      out.push_back(text[i]);
      out.push_back(U' ');
      out.push_back(text[i + 1]);
      if (spacing == PairSpacing::kBetweenAndAfter) out.push_back(U' ');
      i += 2;
    } else {
      out.push_back(text[i]);
      ++i;
    }
  }
  return out;
}

// re.sub(r'(x)', r' \1 ') for a one-character class.
template <typename CharClass>
std::u32string separate_singles(std::u32string_view text, CharClass matches) {
  std::u32string out;
  out.reserve(text.size() + text.size() / 4);
  for (char32_t c : text) {
    if (matches(c)) {
      out.push_back(U' ');
      out.push_back(c);
      out.push_back(U' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ' '.join(text.split())
std::u32string normalize_spaces(std::u32string_view text) {
  return bleu_text::join_tokens(bleu_text::python_split(text)).text;
}

// Python str.replace(from, to): every non-overlapping occurrence, left to right, one pass.
void replace_all(std::u32string& text, std::u32string_view from, std::u32string_view to) {
  std::u32string out;
  size_t start = 0;
  size_t found = text.find(from);
  if (found == std::u32string::npos) return;
  while (found != std::u32string::npos) {
    out.append(text, start, found - start);
    out.append(to);
    start = found + from.size();
    found = text.find(from, start);
  }
  out.append(text, start, std::u32string::npos);
  text = std::move(out);
}

bool is_ascii_digit(char32_t c) {
  return c >= U'0' && c <= U'9';
}
bool is_not_ascii_digit(char32_t c) {
  return !is_ascii_digit(c);
}
bool is_period_or_comma(char32_t c) {
  return c == U'.' || c == U',';
}
bool is_dash(char32_t c) {
  return c == U'-';
}

// [\{-\~\[-\` -\&\(-\+\:-\@\/]: the ASCII characters 13a always splits off (space included).
bool is_13a_separated(char32_t c) {
  return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
         (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == 0x2F;
}

std::u32string tokenize_13a(std::u32string_view line) {
  std::u32string text(line);
  replace_all(text, U"<skipped>", U"");
  replace_all(text, U"-\n", U"");
  replace_all(text, U"\n", U" ");
  if (text.find(U'&') != std::u32string::npos) {
    replace_all(text, U"&quot;", U"\"");
    replace_all(text, U"&amp;", U"&");
    replace_all(text, U"&lt;", U"<");
    replace_all(text, U"&gt;", U">");
  }
  // mteval-v13a pads the line with spaces, which is why "1990." splits here but not in intl.
  text = U" " + text + U" ";
  text = separate_singles(text, is_13a_separated);
  text =
      separate_pairs(text, is_not_ascii_digit, is_period_or_comma, PairSpacing::kBetweenAndAfter);
  text =
      separate_pairs(text, is_period_or_comma, is_not_ascii_digit, PairSpacing::kBeforeAndBetween);
  text = separate_pairs(text, is_ascii_digit, is_dash, PairSpacing::kBetweenAndAfter);
  return normalize_spaces(text);
}

bool is_punctuation(char32_t c) {
  return category_class(c) == CategoryClass::kPunctuation;
}
bool is_symbol(char32_t c) {
  return category_class(c) == CategoryClass::kSymbol;
}
bool is_not_number(char32_t c) {
  return category_class(c) != CategoryClass::kNumber;
}

std::u32string tokenize_intl(std::u32string_view line) {
  std::u32string text =
      separate_pairs(line, is_not_number, is_punctuation, PairSpacing::kBetweenAndAfter);
  text = separate_pairs(text, is_punctuation, is_not_number, PairSpacing::kBeforeAndBetween);
  text = separate_singles(text, is_symbol);
  return normalize_spaces(text);
}

// " ".join(line): every code point, whitespace included, becomes its own token candidate.
std::u32string tokenize_char(std::u32string_view line) {
  std::u32string out;
  out.reserve(line.size() * 2);
  for (size_t i = 0; i < line.size(); ++i) {
    if (i > 0) out.push_back(U' ');
    out.push_back(line[i]);
  }
  return out;
}

}  // namespace

BleuTokenizer parse_bleu_tokenizer(std::string_view name) {
  if (name == "13a") return BleuTokenizer::k13a;
  if (name == "intl") return BleuTokenizer::kIntl;
  if (name == "none") return BleuTokenizer::kNone;
  if (name == "char") return BleuTokenizer::kChar;
  throw std::invalid_argument("unknown BLEU tokenizer '" + std::string(name) +
                              "' (known: 13a, intl, none, char)");
}

const char* bleu_tokenizer_name(BleuTokenizer tokenizer) {
  switch (tokenizer) {
    case BleuTokenizer::k13a:
      return "13a";
    case BleuTokenizer::kIntl:
      return "intl";
    case BleuTokenizer::kNone:
      return "none";
    case BleuTokenizer::kChar:
      return "char";
  }
  throw std::invalid_argument("invalid BleuTokenizer value");
}

std::u32string bleu_tokenize(std::u32string_view line, BleuTokenizer tokenizer) {
  switch (tokenizer) {
    case BleuTokenizer::k13a:
      return tokenize_13a(line);
    case BleuTokenizer::kIntl:
      return tokenize_intl(line);
    case BleuTokenizer::kNone:
      return std::u32string(line);
    case BleuTokenizer::kChar:
      return tokenize_char(line);
  }
  throw std::invalid_argument("invalid BleuTokenizer value");
}

std::string bleu_tokenize_utf8(std::string_view line, BleuTokenizer tokenizer) {
  return bleu_text::encode_utf8(
      bleu_tokenize(bleu_text::decode_utf8(line, "bleu_tokenize"), tokenizer));
}

}  // namespace nmt
