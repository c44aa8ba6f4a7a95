// Internal to the checkpoint code: file names inside a checkpoint directory, the tensor names of
// parameters and Adam moments, tied-parameter aliases, state.json (de)serialisation, host staging.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace nmt::checkpoint_layout {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kBestFile = "best.json";
inline constexpr const char* kFormat = "nmt-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kFirstMomentSuffix = ".exp_avg";  // PyTorch Adam's names
inline constexpr const char* kSecondMomentSuffix = ".exp_avg_sq";
inline constexpr const char* kAliasesKey = "aliases";  // model.safetensors __metadata__ key

// Parameters in registration (forward) order: the order of the tensors in the files.
std::vector<const Param*> ordered_params(const ParamStore& params);

// Tied parameters stored once: alias name → stored name. With shared embeddings the one table is
// stored as encoder.embed_tokens.weight and the decoder's input and output names alias it.
std::map<std::string, std::string> tied_aliases(const ModelConfig& model, const ParamStore& params);

// The aliases recorded in a model.safetensors __metadata__ ("" or absent = none).
std::map<std::string, std::string> parse_aliases(const std::map<std::string, std::string>& metadata,
                                                 const std::string& origin);

// state.json without the "files" table (filled by the writer).
nlohmann::json state_to_json(const CheckpointState& state, const RunConfig& cfg,
                             const std::optional<CheckpointMetric>& metric);
// Parses state.json's content; `origin` names the file in errors.
LoadedCheckpoint state_from_json(const nlohmann::json& json, const std::string& origin);

nlohmann::json metric_to_json(const CheckpointMetric& metric);
CheckpointMetric metric_from_json(const nlohmann::json& json, const std::string& origin);

// A flat f32 tensor of either device, copied to / from host memory.
std::vector<float> copy_to_host(const Tensor& flat);  // flat: [n] f32
void copy_from_host(const std::vector<float>& host, const Tensor& flat);

// Copies the vocabulary file `source` into the directory `dir` (a staged checkpoint) under its own
// file name ("vocab-" + it when that is a checkpoint file's name), fsynced. Returns that name and
// the copy's CRC32C (hex). Throws CheckpointError naming the file.
struct CopiedVocabulary {
  std::string file;
  std::string crc32c;
};
CopiedVocabulary copy_vocabulary_into(const std::string& source, const std::string& dir);

// 12 for "ckpt-12"; nullopt for anything else (temporary directories included).
std::optional<int64_t> step_of_checkpoint_name(const std::string& name);

}  // namespace nmt::checkpoint_layout
