// The training loop behind nmt-train: builds the model and data from a RunConfig, runs steps,
// prints one line per log interval and evaluates on held-out data.
#pragma once

#include <cstdint>
#include <ostream>

#include "engine/config.h"

namespace nmt {

struct EvalResult {
  double loss = 0;            // label-smoothed loss per target token (teacher forcing)
  double token_accuracy = 0;  // teacher-forced argmax accuracy
  double greedy_token_accuracy = 0;  // greedy decoding, position-wise against the reference (+eos)
  double greedy_exact = 0;           // fraction of sentences decoded exactly
  int64_t sentences = 0;
};

struct TrainSummary {
  int64_t steps = 0;
  double wall_seconds = 0;
  double last_loss = 0;  // per token, last log interval
  EvalResult last_eval;
};

// Runs the whole training described by cfg; the log goes to `out`.
TrainSummary run_training(const RunConfig& cfg, std::ostream& out);

}  // namespace nmt
