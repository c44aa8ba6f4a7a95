// Corpus and sentence BLEU identical to sacreBLEU 2.x: its tokenizers, exponential smoothing,
// closest reference length, several references, and its reproducibility signature.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/bleu_tokenizers.h"

namespace nmt {

// The sacreBLEU release whose scores and signature format this code reproduces.
inline constexpr const char* kSacreBleuVersion = "2.6.0";
// The version field of our BLEU and chrF signatures: where sacreBLEU names its own release, we name
// ours and the sacreBLEU release whose scores we reproduce, "nmt-bleu 0.1.0 (sacreBLEU 2.6
// compatible)". The other fields are sacreBLEU's, so the signatures compare field by field.
std::string metric_signature_version();
inline constexpr int kBleuMaxOrder = 4;

struct BleuOptions {
  BleuTokenizer tokenizer = BleuTokenizer::k13a;
  bool lowercase = false;  // Python str.lower() on hypotheses and references before tokenizing
  // Average the log precisions only over the orders the hypothesis has n-grams of (sacreBLEU's
  // effective_order): off for corpus BLEU, on for sentence BLEU, where short lines lack 4-grams.
  bool effective_order = false;
};

// sacreBLEU's sentence_bleu defaults: effective order on.
inline BleuOptions sentence_bleu_options() {
  BleuOptions options;
  options.effective_order = true;
  return options;
}

struct BleuStats {
  double score = 0;                                // 0..100
  std::array<int64_t, kBleuMaxOrder> counts{};     // [order] matched (clipped) n-grams
  std::array<int64_t, kBleuMaxOrder> totals{};     // [order] hypothesis n-grams
  std::array<double, kBleuMaxOrder> precisions{};  // [order] percent, smoothed where counts = 0
  double bp = 1;                                   // brevity penalty
  int64_t sys_len = 0;                             // hypothesis tokens
  int64_t ref_len = 0;                             // closest reference tokens, summed
  BleuOptions options;
  int num_refs = 1;

  double ratio() const { return ref_len > 0 ? static_cast<double>(sys_len) / ref_len : 0.0; }
  // nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:nmt-bleu 0.1.0 (sacreBLEU 2.6 compatible)
  std::string signature() const;
  // "60.1/33.4/20.8/13.1 (BP = 1.000 ratio = 1.012 hyp_len = 1234 ref_len = 1219)"
  std::string verbose() const;
  // "BLEU = 27.31 60.1/33.4/20.8/13.1 (BP = ...)", the score with `width` decimals.
  std::string format(int width = 2) const;
};

// hyps [lines] and refs [lines]: hyps[i] is scored against refs[i]. Lines are UTF-8
// (std::invalid_argument naming the line if not); a count mismatch throws std::invalid_argument.
BleuStats corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      const BleuOptions& options = {});

// Several references, ref_streams [references][lines]: ref_streams[k][i] is the k-th reference
// of hyps[i].
BleuStats corpus_bleu(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const BleuOptions& options = {});

// One hypothesis against its references, refs [references] (one or more).
BleuStats sentence_bleu(const std::string& hyp, const std::vector<std::string>& refs,
                        const BleuOptions& options = sentence_bleu_options());

// The score from summed statistics, as sacreBLEU's BLEU.compute_bleu with exp smoothing.
BleuStats bleu_from_counts(const std::array<int64_t, kBleuMaxOrder>& counts,
                           const std::array<int64_t, kBleuMaxOrder>& totals, int64_t sys_len,
                           int64_t ref_len, const BleuOptions& options, int num_refs);

}  // namespace nmt
