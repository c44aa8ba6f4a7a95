// The BLEU tokenizers of sacreBLEU 2.x that need no external model: 13a (mteval-v13a, the
// default), intl (mteval-v14 international), none and char, reimplemented character for character.
#pragma once

#include <string>
#include <string_view>

namespace nmt {

enum class BleuTokenizer { k13a, kIntl, kNone, kChar };

// "13a", "intl", "none", "char" → the tokenizer; anything else throws std::invalid_argument
// naming the value and the known ones.
BleuTokenizer parse_bleu_tokenizer(std::string_view name);

// The name sacreBLEU puts in the signature (tok:<name>).
const char* bleu_tokenizer_name(BleuTokenizer tokenizer);

// The line as sacreBLEU's tokenizer returns it (tokens separated by spaces). The caller lowercases
// and right-strips first, as sacreBLEU's BLEU does.
std::u32string bleu_tokenize(std::u32string_view line, BleuTokenizer tokenizer);

// The same on UTF-8 text (throws std::invalid_argument on invalid UTF-8).
std::string bleu_tokenize_utf8(std::string_view line, BleuTokenizer tokenizer);

}  // namespace nmt
