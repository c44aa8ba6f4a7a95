// Checkpoints: one directory `ckpt-<step>/` per save holding model.safetensors (fp32 weights by
// PyTorch names), optimizer.safetensors (Adam moments) and state.json (step, data position, RNG,
// loss scale, config, vocabulary, file checksums); written atomically, pruned to the last K plus
// the best, found again and loaded with every mismatch named. Layout and formats:
// docs/checkpoints.md.
#pragma once

#include <cstdint>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint_files.h"
#include "engine/config/config.h"
#include "engine/model/param_store.h"
#include "engine/report/records.h"
#include "kernels/tensor.h"

namespace nmt {

// What a resumed run needs besides the tensors. The checkpoint stores it as given.
struct CheckpointState {
  int64_t step = 0;  // optimizer steps completed
  int64_t epoch = 0;
  nlohmann::json data_position;  // opaque: the batcher's resumable position
  uint64_t seed = 0;             // dropout and data order are counter-based on (seed, step)
  double loss_scale = 1.0;       // dynamic loss scaling (1 for fp32/bf16)
  nlohmann::json lr_schedule;    // opaque: e.g. {"lr": 3e-4}; the schedule is a function of step
  std::string vocab_path;        // "" = none (synthetic data); the source, as the trainer named it
  std::string vocab_crc32c;      // filled by save_checkpoint from the file at vocab_path
  // The copy of that file inside the checkpoint directory, relative to it ("spm.model"): filled
  // by save_checkpoint; "" in checkpoints of builds before the copy. checkpoint_vocabulary_file.
  std::string vocab_file;
  nlohmann::json extra;  // anything else the trainer wants back (patience counter...)
};

// Saves params (and the Adam moments, unless both are empty) under `dir`/ckpt-<state.step>, with a
// copy of the vocabulary file at state.vocab_path (the checkpoint is self-contained):
// written into `dir`/.ckpt-<step>.tmp-<pid>, every file and the directory fsynced, renamed, `dir`
// fsynced. Then, with a metric, best.json is updated when it improves; the `last` and `best` links
// (engine/checkpoint/checkpoint_links.h) are pointed at the new and the best checkpoint (a failure
// there is a warning); then all but the newest `keep` checkpoints (0 = keep all), the best one and
// this one are deleted. Tensors may live on
// either device (copied to the host one at a time). Leftover temporary directories of crashed
// saves are removed: one writer per checkpoint directory (rank 0).
// Throws CheckpointError naming the path (unwritable directory, full disk); the checkpoints
// already in `dir` are untouched then.
SavedCheckpoint save_checkpoint(const std::string& dir, const ParamStore& params,
                                const Tensor& adam_m,  // [params] f32, first moment, or empty
                                const Tensor& adam_v,  // [params] f32, second moment, or empty
                                const CheckpointState& state, const RunConfig& cfg, int64_t keep,
                                const std::optional<CheckpointMetric>& metric = std::nullopt);

struct LoadedCheckpoint {
  std::string path;
  CheckpointState state;
  RunConfig config;                        // the config the checkpoint was trained with
  std::optional<CheckpointMetric> metric;  // the metric passed when it was saved
  bool has_optimizer = false;
};

// state.json alone, parsed and checked (no tensors read): how nmt-translate learns the model
// shape before building the model.
LoadedCheckpoint read_checkpoint_state(const std::string& path);

// Loads weights and Adam moments into `params` and the moment buffers (either device), after
// checking every file's size and checksum. A model that differs from the saved one (missing or
// extra names, other shapes) is a CheckpointError listing each difference, with the model config
// keys that changed between the saved config and `expected`.
LoadedCheckpoint load_checkpoint(const std::string& path, ParamStore& params,
                                 const Tensor& adam_m,  // [params] f32, first moment
                                 const Tensor& adam_v,  // [params] f32, second moment
                                 const RunConfig& expected);

// Weights only (decoding, fine-tuning from a checkpoint with a fresh optimizer).
LoadedCheckpoint load_model_weights(const std::string& path, ParamStore& params);

// Checks that `path` is a complete checkpoint: state.json parses, every file it lists exists with
// the recorded size and checksum, and the safetensors headers are valid. Throws CheckpointError.
void validate_checkpoint(const std::string& path);

// The newest complete checkpoint under `dir` (highest step among `ckpt-<step>` directories that
// pass validate_checkpoint), or nullopt when there is none or `dir` does not exist. Temporary
// directories are ignored; an invalid checkpoint is skipped with a warning naming it and why.
std::optional<std::string> find_latest_checkpoint(const std::string& dir,
                                                  std::ostream& warnings = std::cerr);

struct BestCheckpoint {
  int64_t step = 0;
  std::string path;  // <dir>/ckpt-<step>
  CheckpointMetric metric;
};
// The best checkpoint recorded in `dir`/best.json, if any.
std::optional<BestCheckpoint> read_best_checkpoint(const std::string& dir);

// "section.key: saved X, now Y" for every config key that differs (e.g. to print on resume).
std::vector<std::string> describe_config_changes(const RunConfig& saved, const RunConfig& now);

// Throws CheckpointError when the file at `vocab_path` is not the vocabulary the checkpoint was
// trained with (its CRC32C differs from state.vocab_crc32c).
void check_checkpoint_vocabulary(const CheckpointState& state, const std::string& vocab_path);

// The vocabulary file of a loaded checkpoint: its own copy (state.vocab_file, relative to
// ckpt.path) when it has one, else the path recorded by older builds (relative to where training
// ran); "" when the checkpoint records none (synthetic data).
std::string checkpoint_vocabulary_file(const LoadedCheckpoint& ckpt);

// "ckpt-<step>"
std::string checkpoint_dir_name(int64_t step);

}  // namespace nmt
