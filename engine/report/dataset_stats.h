// DatasetStats: the size of the training corpus a run used (pairs, tokens and text bytes of each
// side), for the end-of-run report; read from nmt-prep's report.json, else from the shard headers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/config/config.h"

namespace nmt {

struct DatasetStats {
  std::string directory;                              // the nmt-prep directory (data.train)
  std::string origin;                                 // "report.json" or "shard headers"
  int64_t pairs = 0;                                  // training pairs (lines) kept by nmt-prep
  int64_t source_tokens = 0, target_tokens = 0;       // subword ids, no bos/eos
  std::optional<int64_t> source_bytes, target_bytes;  // UTF-8 text; unknown from shards alone
  uint64_t shard_bytes = 0;                           // both train shards
};

// nullopt for synthetic data. Falls back to the shard headers when report.json is missing or lacks
// a field; throws std::runtime_error naming the files when neither can be read.
std::optional<DatasetStats> read_dataset_stats(const DataConfig& data);

// The report.json object, or null.
nlohmann::json to_json(const std::optional<DatasetStats>& stats);

}  // namespace nmt
