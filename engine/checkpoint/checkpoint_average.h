// Checkpoint averaging (fairseq's average_checkpoints semantics): the element-wise mean of the
// model weights of several checkpoints of one model, written as a weights-only checkpoint that
// nmt-translate, nmt-export and nmt-train --init-from load. Optimizer state is not averaged (the
// result has none, so it cannot resume training). docs/checkpoints.md.
#pragma once

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace nmt {

struct AveragedCheckpoint {
  std::string path;                  // the new checkpoint directory
  int64_t step = 0;                  // the newest input's step (recorded in state.json)
  int64_t tensors = 0;               // tensors averaged
  std::vector<std::string> sources;  // the inputs, as given
};

// Averages the weights of `checkpoints` into a new checkpoint directory `out` (it must not exist):
// each stored tensor is the mean of the inputs' tensors, summed in double and rounded once to fp32
// (a single input is copied exactly). Every input is validated (sizes, CRC32C) and must hold the
// same model: the same model config, tensor names, shapes and tied aliases; a difference is a
// CheckpointError naming the checkpoint and the tensor or key. state.json is the newest input's
// (highest step) with no metric, the new file table and extra.averaged_from listing the inputs.
// Staged in a temporary directory and renamed: `out` is complete or absent. Throws
// std::invalid_argument for no inputs or an existing `out`.
AveragedCheckpoint average_checkpoints(const std::vector<std::string>& checkpoints,
                                       const std::string& out);

// The newest `count` complete checkpoints (ckpt-<step>) under `dir`, oldest first; invalid ones
// are skipped with a warning. Throws std::invalid_argument when fewer than `count` exist.
std::vector<std::string> latest_checkpoints(const std::string& dir, int64_t count,
                                            std::ostream& warnings = std::cerr);

}  // namespace nmt
