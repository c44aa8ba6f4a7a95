// Fine-tuning from a checkpoint's weights (nmt-train --init-from): the model weights only; the
// optimizer, the step counter, the data position and the learning-rate schedule start fresh.
#pragma once

#include <ostream>
#include <string>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/param_store.h"

namespace nmt {

// Loads the weights of checkpoint `path` (a ckpt-<step> or nmt-average directory) into `params`
// and logs one line to `log`. The model must match exactly: a missing, extra or differently shaped
// tensor is a CheckpointError listing each by name (with the model config keys that changed), and
// nothing is loaded then. `vocab_path` (the run's vocabulary, "" for synthetic data) must be the
// checkpoint's when it recorded one. Throws CheckpointError for a missing or corrupt checkpoint.
// `run` is the new run's config, to name the model keys that differ from the checkpoint's.
LoadedCheckpoint init_from_checkpoint(const std::string& path, ParamStore& params,
                                      const RunConfig& run, const std::string& vocab_path,
                                      std::ostream& log);

}  // namespace nmt
