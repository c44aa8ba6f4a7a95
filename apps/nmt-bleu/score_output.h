// How nmt-bleu prints scores: sacreBLEU 2.6's single-system output (JSON by default, one text
// line per metric aligned on " = ", or the bare score), and nmt-bleu's own older output (a line
// and the signature, or one JSON object with every statistic) kept for the --ref form.
#pragma once

#include <string>
#include <vector>

#include "data/bleu.h"
#include "data/chrf.h"

namespace nmt {

// One metric's result: exactly one of the two is set by the caller.
struct MetricResult {
  const BleuStats* bleu = nullptr;
  const ChrfStats* chrf = nullptr;
};

enum class ScoreFormat { json, text };

// sacreBLEU's output for these results (in sacreBLEU's order: BLEU before chrF), `width`
// decimals; score_only prints the scores alone (a JSON list of them for several metrics with
// ScoreFormat::json, as sacreBLEU does).
std::string format_sacrebleu(const std::vector<MetricResult>& results, ScoreFormat format,
                             int width, bool score_only);

// nmt-bleu's older output of one result: "BLEU = ... \n<signature>\n", or with `json` one object
// with the full-precision score and every statistic.
std::string format_legacy(const MetricResult& result, bool json, int width);

}  // namespace nmt
