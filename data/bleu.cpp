// BLEU as sacreBLEU 2.x computes it: per-segment clipped n-gram counts against the maximum count
// over references, the closest reference length, summed over the corpus, then exp smoothing.
#include "data/bleu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "data/bleu_lines.h"
#include "data/bleu_ngrams.h"
#include "data/bleu_text.h"
#include "version/provenance.h"

namespace nmt {
namespace {

using bleu_text::JoinedTokens;
using bleu_text::NgramCounts;

// sacreBLEU's my_log: log(0) is floored so one empty order drives the score to 0, not NaN.
double floored_log(double value) {
  return value == 0.0 ? -9999999999.0 : std::log(value);
}

// sacreBLEU's _preprocess_segment: lowercase, rstrip, tokenize; then split into tokens.
JoinedTokens preprocess(const std::string& line, const BleuOptions& options,
                        const std::string& where) {
  std::u32string text = bleu_text::decode_utf8(line, where);
  if (options.lowercase) text = bleu_text::python_lower(text);
  const std::u32string tokenized = bleu_tokenize(bleu_text::python_rstrip(text), options.tokenizer);
  return bleu_text::join_tokens(bleu_text::python_split(tokenized));
}

struct SegmentCounts {
  int64_t sys_len = 0;
  int64_t ref_len = 0;
  std::array<int64_t, kBleuMaxOrder> counts{};
  std::array<int64_t, kBleuMaxOrder> totals{};
};

// The reference length closest to the hypothesis length; ties go to the shorter reference.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1;
  int64_t best_len = -1;
  for (int64_t ref_len : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - ref_len);
    if (best_diff == -1 || diff < best_diff || (diff == best_diff && ref_len < best_len)) {
      best_diff = diff;
      best_len = ref_len;
    }
  }
  return best_len;
}

SegmentCounts segment_counts(const std::string& hyp, const std::vector<const std::string*>& refs,
                             const BleuOptions& options, size_t line) {
  const std::string line_text = "line " + std::to_string(line + 1);
  std::vector<JoinedTokens> ref_tokens;
  std::vector<int64_t> ref_lens;
  for (size_t k = 0; k < refs.size(); ++k) {
    ref_tokens.push_back(preprocess(*refs[k], options, "reference " + line_text));
    ref_lens.push_back(static_cast<int64_t>(ref_tokens.back().size()));
  }
  const JoinedTokens hyp_tokens = preprocess(hyp, options, "hypothesis " + line_text);

  SegmentCounts segment;
  segment.sys_len = static_cast<int64_t>(hyp_tokens.size());
  segment.ref_len = closest_ref_len(segment.sys_len, ref_lens);
  for (int order = 1; order <= kBleuMaxOrder; ++order) {
    // With several references an n-gram may match as often as the most generous one has it.
    NgramCounts ref_max;
    for (const JoinedTokens& tokens : ref_tokens) {
      for (const auto& [ngram, count] : bleu_text::count_token_ngrams(tokens, order)) {
        int64_t& best = ref_max[ngram];
        best = std::max(best, count);
      }
    }
    const NgramCounts hyp_counts = bleu_text::count_token_ngrams(hyp_tokens, order);
    segment.totals[order - 1] = bleu_text::ngram_total(hyp_tokens.size(), order);
    segment.counts[order - 1] = bleu_text::clipped_matches(hyp_counts, ref_max);
  }
  return segment;
}

}  // namespace

std::string metric_signature_version() {
  const std::string sacrebleu = kSacreBleuVersion;
  const std::string major_minor = sacrebleu.substr(0, sacrebleu.rfind('.'));
  return std::string("nmt-bleu ") + project_version() + " (sacreBLEU " + major_minor +
         " compatible)";
}

std::string BleuStats::signature() const {
  return "nrefs:" + std::to_string(num_refs) + "|case:" + (options.lowercase ? "lc" : "mixed") +
         "|eff:" + (options.effective_order ? "yes" : "no") +
         "|tok:" + bleu_tokenizer_name(options.tokenizer) +
         "|smooth:exp|version:" + metric_signature_version();
}

std::string BleuStats::verbose() const {
  std::string text;
  for (int n = 0; n < kBleuMaxOrder; ++n) {
    if (n > 0) text += "/";
    text += bleu_text::format_fixed(precisions[n], 1);
  }
  text += " (BP = " + bleu_text::format_fixed(bp, 3) +
          " ratio = " + bleu_text::format_fixed(ratio(), 3) +
          " hyp_len = " + std::to_string(sys_len) + " ref_len = " + std::to_string(ref_len) + ")";
  return text;
}

std::string BleuStats::format(int width) const {
  return "BLEU = " + bleu_text::format_fixed(score, width) + " " + verbose();
}

BleuStats bleu_from_counts(const std::array<int64_t, kBleuMaxOrder>& counts,
                           const std::array<int64_t, kBleuMaxOrder>& totals, int64_t sys_len,
                           int64_t ref_len, const BleuOptions& options, int num_refs) {
  BleuStats stats;
  stats.counts = counts;
  stats.totals = totals;
  stats.sys_len = sys_len;
  stats.ref_len = ref_len;
  stats.options = options;
  stats.num_refs = num_refs;
  if (sys_len < ref_len) {
    stats.bp = sys_len > 0 ? std::exp(1.0 - static_cast<double>(ref_len) / sys_len) : 0.0;
  }
  bool any_match = false;
  for (int64_t count : counts) any_match = any_match || count != 0;
  if (!any_match) return stats;  // score 0, precisions 0 (sacreBLEU issue #141)

  // The operations below follow sacreBLEU's order so that the doubles come out bit-identical.
  double smooth_mteval = 1.0;
  int effective_order = kBleuMaxOrder;
  for (int n = 1; n <= kBleuMaxOrder; ++n) {
    if (totals[n - 1] == 0) break;
    if (options.effective_order) effective_order = n;
    if (counts[n - 1] == 0) {
      smooth_mteval *= 2;  // NIST geometric smoothing: 1/2, 1/4, ... of one match
      stats.precisions[n - 1] = 100.0 / (smooth_mteval * static_cast<double>(totals[n - 1]));
    } else {
      stats.precisions[n - 1] = 100.0 * static_cast<double>(counts[n - 1]) / totals[n - 1];
    }
  }
  double log_sum = 0.0;
  for (int n = 0; n < effective_order; ++n) log_sum += floored_log(stats.precisions[n]);
  stats.score = stats.bp * std::exp(log_sum / effective_order);
  return stats;
}

BleuStats corpus_bleu(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const BleuOptions& options) {
  const std::vector<SegmentCounts> segments = bleu_text::score_segments(
      "corpus_bleu", hyps, ref_streams, [&](size_t i, const std::vector<const std::string*>& refs) {
        return segment_counts(hyps[i], refs, options, i);
      });
  std::array<int64_t, kBleuMaxOrder> counts{};
  std::array<int64_t, kBleuMaxOrder> totals{};
  int64_t sys_len = 0;
  int64_t ref_len = 0;
  for (const SegmentCounts& segment : segments) {
    sys_len += segment.sys_len;
    ref_len += segment.ref_len;
    for (int n = 0; n < kBleuMaxOrder; ++n) {
      counts[n] += segment.counts[n];
      totals[n] += segment.totals[n];
    }
  }
  return bleu_from_counts(counts, totals, sys_len, ref_len, options,
                          static_cast<int>(ref_streams.size()));
}

BleuStats corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      const BleuOptions& options) {
  return corpus_bleu(hyps, std::vector<std::vector<std::string>>{refs}, options);
}

BleuStats sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs,
                        const BleuOptions& options) {
  if (refs.empty()) throw std::invalid_argument("sentence_bleu: no references given");
  std::vector<const std::string*> ref_pointers;
  for (const std::string& ref : refs) ref_pointers.push_back(&ref);
  const SegmentCounts segment = segment_counts(hyp, ref_pointers, options, 0);
  return bleu_from_counts(segment.counts, segment.totals, segment.sys_len, segment.ref_len, options,
                          static_cast<int>(refs.size()));
}

}  // namespace nmt
