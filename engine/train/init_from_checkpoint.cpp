// init_from_checkpoint: validate, load the weights (every mismatch named), check the vocabulary.
#include "engine/train/init_from_checkpoint.h"

namespace nmt {

LoadedCheckpoint init_from_checkpoint(const std::string& path, ParamStore& params,
                                      const RunConfig& run, const std::string& vocab_path,
                                      std::ostream& log) {
  validate_checkpoint(path);  // sizes and checksums, before the weights are read
  LoadedCheckpoint state = read_checkpoint_state(path);
  // Checked before the weights: another vocabulary of the same size would load, and mean nothing.
  if (!vocab_path.empty()) check_checkpoint_vocabulary(state.state, vocab_path);
  LoadedCheckpoint loaded;
  try {
    loaded = load_model_weights(path, params);
  } catch (const CheckpointError& e) {
    std::string changes;
    for (const std::string& c : describe_config_changes(state.config, run))
      if (c.starts_with("model.")) changes += "\n  " + c;
    if (changes.empty()) throw;
    throw CheckpointError(std::string(e.what()) + "\nmodel config changes:" + changes);
  }
  log << "initialized from " << path << " (step " << loaded.state.step
      << "): weights only; optimizer, step and data position start fresh\n"
      << std::flush;
  return loaded;
}

}  // namespace nmt
