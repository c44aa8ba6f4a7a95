// chrF(++) as sacreBLEU 2.x computes it: per segment and order, n-gram counts of hypothesis and
// reference and their clipped matches, summed over the corpus, then one F-beta score.
#include "data/chrf.h"

#include <stdexcept>
#include <utility>

#include "data/bleu.h"
#include "data/bleu_lines.h"
#include "data/bleu_ngrams.h"
#include "data/bleu_text.h"

namespace nmt {
namespace {

using bleu_text::NgramCounts;

// Python's string.punctuation, which chrF++ splits off the ends of words.
bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// sacreBLEU's CHRF._remove_punctuation: one punctuation mark is split off the end of a word, or
// else off its start ("(hi)" gives "(hi" and ")").
std::vector<std::u32string_view> words_for_chrf(std::u32string_view text) {
  std::vector<std::u32string_view> words;
  for (std::u32string_view word : bleu_text::python_split(text)) {
    if (word.size() == 1) {
      words.push_back(word);
    } else if (is_ascii_punctuation(word.back())) {
      words.push_back(word.substr(0, word.size() - 1));
      words.push_back(word.substr(word.size() - 1));
    } else if (is_ascii_punctuation(word.front())) {
      words.push_back(word.substr(0, 1));
      words.push_back(word.substr(1));
    } else {
      words.push_back(word);
    }
  }
  return words;
}

// The n-grams of one segment for every order. Counts hold views into the strings, so an instance
// never moves once filled.
struct SegmentNgrams {
  std::u32string text;   // decoded, lowercased if asked
  std::u32string chars;  // what character n-grams are taken from
  bleu_text::JoinedTokens words;
  std::vector<NgramCounts> counts;  // [order]
  std::vector<int64_t> totals;      // [order] number of n-grams

  SegmentNgrams() = default;
  SegmentNgrams(const SegmentNgrams&) = delete;
  SegmentNgrams& operator=(const SegmentNgrams&) = delete;
};

void extract_ngrams(const std::string& line, const ChrfOptions& options, const std::string& where,
                    SegmentNgrams& out) {
  out.text = bleu_text::decode_utf8(line, where);
  if (options.lowercase) out.text = bleu_text::python_lower(out.text);
  if (options.whitespace) {
    out.chars = out.text;
  } else {
    for (std::u32string_view piece : bleu_text::python_split(out.text)) out.chars.append(piece);
  }
  for (int order = 1; order <= options.char_order; ++order) {
    out.counts.push_back(bleu_text::count_char_ngrams(out.chars, order));
    out.totals.push_back(bleu_text::ngram_total(out.chars.size(), order));
  }
  if (options.word_order > 0) out.words = bleu_text::join_tokens(words_for_chrf(out.text));
  for (int order = 1; order <= options.word_order; ++order) {
    out.counts.push_back(bleu_text::count_token_ngrams(out.words, order));
    out.totals.push_back(bleu_text::ngram_total(out.words.size(), order));
  }
}

// [order, 3] statistics of a hypothesis against one reference. Hypothesis n-grams of an order
// the reference has none of are not counted (sacreBLEU's rule).
std::vector<int64_t> match_stats(const SegmentNgrams& hyp, const SegmentNgrams& ref) {
  std::vector<int64_t> stats;
  for (size_t order = 0; order < hyp.counts.size(); ++order) {
    stats.push_back(ref.totals[order] > 0 ? hyp.totals[order] : 0);
    stats.push_back(ref.totals[order]);
    stats.push_back(bleu_text::clipped_matches(hyp.counts[order], ref.counts[order]));
  }
  return stats;
}

void check_options(const ChrfOptions& options) {
  if (options.char_order < 0 || options.word_order < 0 ||
      options.char_order + options.word_order < 1) {
    throw std::invalid_argument("chrF: char_order and word_order must be >= 0 and not both 0");
  }
  if (options.beta < 0) throw std::invalid_argument("chrF: beta must be >= 0");
}

// The statistics of the reference that gives the segment its best F score (the first on ties).
std::vector<int64_t> segment_stats(const std::string& hyp,
                                   const std::vector<const std::string*>& refs,
                                   const ChrfOptions& options, size_t line) {
  const std::string line_text = "line " + std::to_string(line + 1);
  SegmentNgrams hyp_ngrams;
  extract_ngrams(hyp, options, "hypothesis " + line_text, hyp_ngrams);
  std::vector<int64_t> best_stats;
  double best_score = -1.0;
  for (const std::string* ref : refs) {
    SegmentNgrams ref_ngrams;
    extract_ngrams(*ref, options, "reference " + line_text, ref_ngrams);
    std::vector<int64_t> stats = match_stats(hyp_ngrams, ref_ngrams);
    const double score = chrf_from_stats(stats, options);
    if (score > best_score) {
      best_score = score;
      best_stats = std::move(stats);
    }
  }
  return best_stats;
}

}  // namespace

std::string ChrfStats::name() const {
  return "chrF" + std::to_string(options.beta) + std::string(options.word_order, '+');
}

std::string ChrfStats::signature() const {
  return "nrefs:" + std::to_string(num_refs) + "|case:" + (options.lowercase ? "lc" : "mixed") +
         "|eff:" + (options.eps_smoothing ? "no" : "yes") +
         "|nc:" + std::to_string(options.char_order) + "|nw:" + std::to_string(options.word_order) +
         "|space:" + (options.whitespace ? "yes" : "no") + "|version:" + metric_signature_version();
}

std::string ChrfStats::format(int width) const {
  return name() + " = " + bleu_text::format_fixed(score, width);
}

double chrf_from_stats(const std::vector<int64_t>& stats, const ChrfOptions& options) {
  // Same operations in the same order as sacreBLEU's _compute_f_score, for identical doubles.
  const double eps = 1e-16;
  const int orders = options.char_order + options.word_order;
  const double factor = static_cast<double>(options.beta) * options.beta;
  double eps_score = 0.0;
  double avg_precision = 0.0;
  double avg_recall = 0.0;
  int effective_order = 0;
  for (int i = 0; i < orders; ++i) {
    const int64_t n_hyp = stats[3 * i];
    const int64_t n_ref = stats[3 * i + 1];
    const int64_t n_match = stats[3 * i + 2];
    const double precision = n_hyp > 0 ? static_cast<double>(n_match) / n_hyp : eps;
    const double recall = n_ref > 0 ? static_cast<double>(n_match) / n_ref : eps;
    const double denominator = factor * precision + recall;
    eps_score += denominator > 0 ? (1 + factor) * precision * recall / denominator : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_precision += precision;
      avg_recall += recall;
      ++effective_order;
    }
  }
  if (options.eps_smoothing) return 100 * eps_score / orders;
  if (effective_order == 0) return 0.0;
  avg_precision /= effective_order;
  avg_recall /= effective_order;
  if (avg_precision + avg_recall == 0.0) return 0.0;
  double score = (1 + factor) * avg_precision * avg_recall;
  score /= factor * avg_precision + avg_recall;
  return 100 * score;
}

ChrfStats corpus_chrf(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const ChrfOptions& options) {
  check_options(options);
  const std::vector<std::vector<int64_t>> segments = bleu_text::score_segments(
      "corpus_chrf", hyps, ref_streams, [&](size_t i, const std::vector<const std::string*>& refs) {
        return segment_stats(hyps[i], refs, options, i);
      });
  ChrfStats result;
  result.options = options;
  result.num_refs = static_cast<int>(ref_streams.size());
  result.stats.assign(3 * (options.char_order + options.word_order), 0);
  for (const std::vector<int64_t>& stats : segments)
    for (size_t j = 0; j < stats.size(); ++j) result.stats[j] += stats[j];
  result.score = chrf_from_stats(result.stats, options);
  return result;
}

ChrfStats corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      const ChrfOptions& options) {
  return corpus_chrf(hyps, std::vector<std::vector<std::string>>{refs}, options);
}

ChrfStats sentence_chrf(const std::string& hyp, const std::vector<std::string>& refs,
                        const ChrfOptions& options) {
  check_options(options);
  if (refs.empty()) throw std::invalid_argument("sentence_chrf: no references given");
  std::vector<const std::string*> ref_pointers;
  for (const std::string& ref : refs) ref_pointers.push_back(&ref);
  ChrfStats result;
  result.options = options;
  result.num_refs = static_cast<int>(refs.size());
  result.stats = segment_stats(hyp, ref_pointers, options, 0);
  result.score = chrf_from_stats(result.stats, options);
  return result;
}

}  // namespace nmt
