// Evaluation during training: dev loss with teacher forcing, then decoding of every dev line (the
// first eval.max_sentences lines when set), scored by position-wise accuracy (synthetic tasks) or
// sacreBLEU-identical BLEU over the whole file (real corpora).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/decode.h"
#include "engine/training_data.h"
#include "engine/transformer.h"

namespace nmt {

struct EvalOptions {
  int64_t max_sentences = 0;  // score the first N lines of the dev file; 0 = every line
  int64_t samples = 3;        // (source, reference, prediction) triples kept: the first lines
  // model.max_positions: longer sources are cut to it (counted), and no translation's prefix
  // (bos + tokens) grows beyond it.
  int64_t max_positions = 1024;
  // Beam 1 = greedy (argmax, ties to the lower id); a·n + b target tokens for an n-token source.
  BeamOptions decoding{1, 0.0, 1.5, 10, false};
};

// The options nmt-train evaluates with: eval.max_sentences, eval.samples, model.max_positions,
// greedy decoding (eval.beam is not used during training yet).
EvalOptions eval_options_from(const RunConfig& cfg);

struct EvalResult {
  double loss = 0;                   // label-smoothed loss per target token (teacher forcing)
  double token_accuracy = 0;         // teacher-forced argmax accuracy
  double greedy_token_accuracy = 0;  // decoding, position-wise against the reference (+eos)
  double greedy_exact = 0;           // fraction of scored lines decoded exactly
  bool has_bleu = false;
  double bleu = 0;
  std::string bleu_signature;
  std::string bleu_line;       // "BLEU = 27.31 60.1/33.4/20.8/13.1 (BP = ...)"
  int64_t sentences = 0;       // dev lines decoded and scored (every line, or the first N)
  int64_t lines_in_file = 0;   // lines of the dev file
  int64_t truncated = 0;       // scored lines whose source was cut to max_positions
  int64_t max_positions = 0;   // the length they were cut to
  int64_t loss_sentences = 0;  // scored lines the dev loss covers: those within the training plan
  // One per scored line, in file order: the best hypothesis, detokenized (ids for synthetic
  // data), and its length in tokens (eos excluded).
  std::vector<std::string> hypotheses;
  std::vector<int64_t> hypothesis_tokens;
  // A few (source, reference, prediction) triples for the log.
  std::vector<std::vector<std::string>> samples;
};

// Evaluates on data's dev set. The loss covers the scored lines whose pair fits `model`'s plan
// (the training length limits); decoding covers every scored line: empty sources give empty
// hypotheses, sources longer than the plan are decoded by a second model planned for them (the
// same weights), sources longer than options.max_positions are cut to it first.
EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        const EvalOptions& options);

// The log lines of an evaluation (a warning line when sources were cut).
std::string format_eval(int64_t step, const EvalResult& e);

}  // namespace nmt
