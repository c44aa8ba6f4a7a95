// Evaluation during training: dev loss with teacher forcing, then decoding of every dev line (the
// first eval.max_sentences lines when set), scored by position-wise accuracy (synthetic tasks) or
// sacreBLEU-identical BLEU over the whole file (real corpora).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/decode/decode.h"
#include "engine/model/transformer.h"
#include "engine/report/records.h"
#include "engine/train/training_data.h"

namespace nmt {

struct EvalOptions {
  int64_t max_sentences = 0;  // score the first N lines of the dev file; 0 = every line
  int64_t samples = 3;        // (source, reference, prediction) triples kept: the first lines
  // model.max_positions: longer sources are cut to it (counted), and no translation's prefix
  // (bos + tokens) grows beyond it.
  int64_t max_positions = 1024;
  // Beam 1 = greedy (argmax, ties to the lower id); a·n + b target tokens for an n-token source.
  BeamOptions decoding{1, 0.0, 1.5, 10};
};

// The options nmt-train evaluates with: eval.max_sentences, eval.samples, model.max_positions,
// greedy decoding (eval.beam is not used during training yet).
EvalOptions eval_options_from(const RunConfig& cfg);

// Evaluates on data's dev set. The loss covers the scored lines whose pair fits `model`'s plan
// (the training length limits); decoding covers every scored line: empty sources give empty
// hypotheses, sources longer than the plan are decoded by a second model planned for them (the
// same weights), sources longer than options.max_positions are cut to it first.
EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        const EvalOptions& options);

}  // namespace nmt
