// N-gram counting shared by BLEU (word n-grams) and chrF (character and word n-grams): counts
// keyed by views into text the caller keeps alive.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "data/bleu_text.h"

namespace nmt::bleu_text {

using NgramCounts = std::unordered_map<std::u32string_view, int64_t>;

// Counts of the n-grams of `order` consecutive tokens (keys are views into tokens.text).
inline NgramCounts count_token_ngrams(const JoinedTokens& tokens, size_t order) {
  NgramCounts counts;
  for (size_t first = 0; first + order <= tokens.size(); ++first) {
    ++counts[tokens.span(first, order)];
  }
  return counts;
}

// Counts of the substrings of `order` code points (keys are views into text).
inline NgramCounts count_char_ngrams(std::u32string_view text, size_t order) {
  NgramCounts counts;
  for (size_t first = 0; first + order <= text.size(); ++first) {
    ++counts[text.substr(first, order)];
  }
  return counts;
}

// Matched n-grams: each hypothesis n-gram counts at most as often as the reference has it.
inline int64_t clipped_matches(const NgramCounts& hypothesis, const NgramCounts& reference) {
  int64_t matches = 0;
  for (const auto& [ngram, count] : hypothesis) {
    auto found = reference.find(ngram);
    if (found != reference.end()) matches += std::min(count, found->second);
  }
  return matches;
}

// Number of n-grams of `order` items in a sequence of `length` items.
inline int64_t ngram_total(size_t length, size_t order) {
  return length >= order ? static_cast<int64_t>(length - order + 1) : 0;
}

}  // namespace nmt::bleu_text
