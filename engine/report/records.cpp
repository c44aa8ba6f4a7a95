// Text of the records: an evaluation's log lines and the score that ranks checkpoints.
#include "engine/report/records.h"

#include <cstdio>
#include <sstream>

namespace nmt {

std::string format_eval(int64_t step, const EvalResult& e) {
  std::ostringstream out;
  char line[400];
  std::snprintf(line, sizeof line,
                "eval step %lld | dev loss %.4f (%lld of %lld lines within the training length "
                "limits) | dev acc %.2f%% | greedy token acc %.2f%% | exact %.2f%% | %lld of "
                "%lld lines scored\n",
                static_cast<long long>(step), e.loss, static_cast<long long>(e.loss_sentences),
                static_cast<long long>(e.sentences), 100 * e.token_accuracy,
                100 * e.greedy_token_accuracy, 100 * e.greedy_exact,
                static_cast<long long>(e.sentences), static_cast<long long>(e.lines_in_file));
  out << line;
  if (e.truncated > 0)
    out << "eval step " << step << " | warning: " << e.truncated
        << " dev sources longer than model.max_positions = " << e.max_positions
        << " tokens were cut to it before decoding\n";
  if (e.has_bleu)
    out << "eval step " << step << " | " << e.bleu_line << " | " << e.bleu_signature << " | "
        << e.sentences << " of " << e.lines_in_file << " lines\n";
  for (const auto& s : e.samples)
    out << "  source:     " << s[0] << "\n  reference:  " << s[1] << "\n  prediction: " << s[2]
        << "\n";
  return out.str();
}

CheckpointMetric eval_metric(const EvalResult& e) {
  if (e.has_bleu) return {"bleu", e.bleu, true};
  return {"greedy_token_accuracy", e.greedy_token_accuracy, true};
}

}  // namespace nmt
