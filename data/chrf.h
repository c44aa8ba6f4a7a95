// chrF and chrF++ identical to sacreBLEU 2.x's CHRF (defaults: character order 6, word order 0,
// beta 2, whitespace removed, effective-order averaging), with its signature.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nmt {

struct ChrfOptions {
  int char_order = 6;  // character n-grams of 1..char_order code points
  int word_order = 0;  // word n-grams of 1..word_order words; 2 makes chrF++
  int beta = 2;        // recall weighs beta times as much as precision
  bool lowercase = false;
  bool whitespace = false;     // keep whitespace inside character n-grams
  bool eps_smoothing = false;  // average per-order F scores (chrF++.py style) instead
};

struct ChrfStats {
  double score = 0;  // 0..100
  // [char_order + word_order, 3]: hypothesis n-grams, reference n-grams, matched n-grams per
  // order (character orders first), summed over the corpus.
  std::vector<int64_t> stats;
  ChrfOptions options;
  int num_refs = 1;

  std::string name() const;  // "chrF2", "chrF2++"
  // nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:nmt-bleu 0.1.0 (sacreBLEU 2.6 compatible)
  std::string signature() const;
  std::string format(int width = 2) const;  // "chrF2 = 55.12"
};

// hyps [lines], refs [lines]: hyps[i] is scored against refs[i]; lines are UTF-8
// (std::invalid_argument naming the line if not); count mismatches and invalid options throw
// std::invalid_argument.
ChrfStats corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                      const ChrfOptions& options = {});

// Several references, ref_streams [references][lines]: ref_streams[k][i] is the k-th reference
// of hyps[i]; each segment uses the reference that gives it the best F score.
ChrfStats corpus_chrf(const std::vector<std::string>& hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const ChrfOptions& options = {});

// One hypothesis against its references, refs [references].
ChrfStats sentence_chrf(const std::string& hyp, const std::vector<std::string>& refs,
                        const ChrfOptions& options = {});

// The score of summed statistics (layout of ChrfStats::stats), as sacreBLEU's _compute_f_score.
double chrf_from_stats(const std::vector<int64_t>& stats, const ChrfOptions& options);

}  // namespace nmt
