// Evaluation during training: dev loss with teacher forcing, then greedy decoding of the dev set,
// scored by position-wise accuracy (synthetic tasks) or sacreBLEU-identical BLEU (real corpora).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/training_data.h"
#include "engine/transformer.h"

namespace nmt {

struct EvalResult {
  double loss = 0;                   // label-smoothed loss per target token (teacher forcing)
  double token_accuracy = 0;         // teacher-forced argmax accuracy
  double greedy_token_accuracy = 0;  // greedy decoding, position-wise against the reference (+eos)
  double greedy_exact = 0;           // fraction of sentences decoded exactly
  bool has_bleu = false;
  double bleu = 0;
  std::string bleu_signature;
  std::string bleu_line;  // "BLEU = 27.31 60.1/33.4/20.8/13.1 (BP = ...)"
  int64_t sentences = 0;
  // A few (source, reference, prediction) triples for the log.
  std::vector<std::vector<std::string>> samples;
};

// Evaluates on data's dev set; at most max_sentences (0 = all), `samples` examples kept.
EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        int64_t max_sentences, int64_t samples);

// The log lines of an evaluation.
std::string format_eval(int64_t step, const EvalResult& e);

}  // namespace nmt
