// The training loop behind nmt-train: builds the model and data from a RunConfig (or resumes them
// from the newest checkpoint), runs steps, reports (stdout, metrics.jsonl, TensorBoard,
// report.json), evaluates, checkpoints, and stops cleanly on SIGTERM/SIGINT.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/model/model_shape.h"
#include "engine/train/evaluator.h"

namespace nmt {

struct TrainOptions {
  // Continue from find_latest_checkpoint(checkpoint.dir): weights, Adam moments, data position,
  // step; the rest of the run is bit-identical to an uninterrupted one.
  bool resume = false;
  // Fine-tuning: a new run whose weights come from this checkpoint
  // (engine/train/init_from_checkpoint.h); optimizer, step and data start fresh. Not with `resume`.
  std::string init_from;
  // Polled after every step: nonzero (a signal number) finishes that step, saves a checkpoint
  // (when checkpoint.dir is set) and returns. See install_stop_signal_handlers.
  const std::atomic<int>* stop_signal = nullptr;
  // Under mpirun, train data-parallel over the job's ranks; false keeps this process alone (tests
  // compare a distributed run with a single-process one inside one MPI job).
  bool distributed = true;
  // The program's command line (argv), recorded in the start event and report.json.
  std::vector<std::string> command_line;
  // When set, receives the final fp32 master weights (flat, ParamStore layout).
  std::vector<float>* final_parameters = nullptr;
};

struct TrainSummary {
  int64_t steps = 0;       // the last completed step (a resumed run counts the earlier ones)
  int64_t first_step = 0;  // steps already done when this run started (the checkpoint's)
  double wall_seconds = 0;
  double last_loss = 0;  // per token, last log interval
  EvalResult last_eval;
  int stop_signal = 0;              // the signal that stopped the run early; 0 otherwise
  bool early_stopped = false;       // eval.early_stop_patience evaluations without improvement
  bool time_limit_reached = false;  // stopped before train.max_time with a checkpoint
  std::string last_checkpoint;      // written by this run; "" if none
  std::string card_dir;  // log.dir when log.card asks for the run card there (rank 0); else ""
};

// Runs the whole training described by cfg; the log goes to `out`. Throws std::runtime_error
// (ConfigError, CheckpointError) with one message on any user error: no checkpoint to resume,
// a checkpoint of another model shape or vocabulary, an unwritable checkpoint.dir or log.dir, a
// new run into a checkpoint.dir that already holds checkpoints.
TrainSummary run_training(const RunConfig& cfg, std::ostream& out,
                          const TrainOptions& options = {});

// Installs handlers for SIGTERM and SIGINT that store the first signal's number in the returned
// flag (async-signal-safe; the signal may land on any thread). Any number of SIGTERMs leads to the
// same orderly save and exit; a second SIGINT (Ctrl-C twice) ends the process at once
// (checkpoints are atomic, so that loses only progress).
std::atomic<int>& install_stop_signal_handlers();

}  // namespace nmt
