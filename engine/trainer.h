// The training loop behind nmt-train: builds the model and data from a RunConfig, runs steps,
// prints one line per log interval and evaluates on held-out data.
#pragma once

#include <cstdint>
#include <ostream>

#include "engine/config.h"
#include "engine/evaluator.h"

namespace nmt {

struct TrainSummary {
  int64_t steps = 0;
  double wall_seconds = 0;
  double last_loss = 0;  // per token, last log interval
  EvalResult last_eval;
};

// Runs the whole training described by cfg; the log goes to `out`.
TrainSummary run_training(const RunConfig& cfg, std::ostream& out);

}  // namespace nmt
