// The records a run reports, filled by train/ and checkpoint/ and printed by report/: an
// evaluation's results (EvalResult), the score that ranks checkpoints (CheckpointMetric) and what
// a save wrote (SavedCheckpoint). Plain values, so that report/ knows records, not the model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nmt {

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
  // Lines the training model's plan could not decode to their limit, decoded by a second model
  // planned for them (replanned_lines), and of those the greedy ones tried in the training model
  // first whose translation reached its cap there (capped_lines).
  int64_t replanned_lines = 0;
  int64_t capped_lines = 0;
  double loss_seconds = 0;    // wall time of the dev loss (the model's work waited for)
  double decode_seconds = 0;  // of the decoding, both models' (BLEU and the scores not included)
  // One per scored line, in file order: the best hypothesis, detokenized (ids for synthetic
  // data), and its length in tokens (eos excluded).
  std::vector<std::string> hypotheses;
  std::vector<int64_t> hypothesis_tokens;
  // A few (source, reference, prediction) triples for the log.
  std::vector<std::vector<std::string>> samples;
};

// The log lines of an evaluation (a warning line when sources were cut).
std::string format_eval(int64_t step, const EvalResult& e);

// The evaluation score that ranks checkpoints (e.g. dev BLEU); the best one is never pruned.
struct CheckpointMetric {
  std::string name = "bleu";
  double value = 0;
  bool higher_is_better = true;
};

// The score that ranks checkpoints: BLEU for real corpora, greedy token accuracy otherwise.
CheckpointMetric eval_metric(const EvalResult& e);

struct SavedCheckpoint {
  std::string path;                   // <dir>/ckpt-<step>
  uint64_t bytes = 0;                 // all files of the checkpoint
  double seconds = 0;                 // wall time of the save (copy to host, write, sync)
  bool is_best = false;               // this save became best.json's checkpoint
  std::vector<std::string> removed;   // older checkpoints pruned
  std::vector<std::string> warnings;  // pruning failures: the new checkpoint is complete anyway
  // Each file of the checkpoint directory (name -> bytes), for the run card.
  std::map<std::string, uint64_t> files;
};

}  // namespace nmt
