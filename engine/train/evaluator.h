// Evaluation during training: dev loss with teacher forcing, then greedy decoding of the dev set,
// scored by position-wise accuracy (synthetic tasks) or sacreBLEU-identical BLEU (real corpora).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/transformer.h"
#include "engine/report/records.h"
#include "engine/train/training_data.h"

namespace nmt {

// Evaluates on data's dev set; at most max_sentences (0 = all), `samples` examples kept.
EvalResult evaluate_dev(Transformer& model, const TrainingData& data, float label_smoothing,
                        int64_t max_sentences, int64_t samples);

}  // namespace nmt
