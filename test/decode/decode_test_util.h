// Helpers for the decoding suites: a scratch directory per test, the small reverse-task config,
// training a tiny model on it (saved as a checkpoint) once per process, and the task as text.
#pragma once

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/synthetic_reverse.h"
#include "test/support/lib/scratch_dir.h"

namespace nmt::test {

// A one-layer model on the synthetic reversal task, CPU, fp32.
RunConfig reverse_config();

// reverse_config()'s task (its training pairs and held-out sources), built on first use.
const SyntheticReverse& reverse_data();

// The checkpoint of reverse_config()'s model after `kReverseTrainSteps` steps, trained on the first
// call and shared by every later one (the directory lives until the process ends).
inline constexpr int64_t kReverseTrainSteps = 600;
const std::string& trained_reverse_checkpoint();

// The reversal task as text: a piece list "a", "b", ... for the synthetic symbols (ids 4, 5, ...),
// and the task's held-out sources and their reversals written with it. Built on first use.
struct ReverseText {
  std::string vocab;  // piece-list file, for nmt-translate --vocab
  std::vector<std::string> sources, reversed;
};
const ReverseText& reverse_text();

}  // namespace nmt::test
