// Reading the training corpus statistics from an nmt-prep directory (docs/data.md).
#include "engine/report/dataset_stats.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "data/shard.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

// splits.train of report.json; throws nlohmann::json::exception or std::runtime_error.
DatasetStats from_report(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  nlohmann::json report = nlohmann::json::parse(in);
  const nlohmann::json& train = report.at("splits").at("train");
  DatasetStats s;
  s.origin = "report.json";
  s.pairs = train.at("pairs_kept").get<int64_t>();
  s.source_tokens = train.at("source").at("tokens").get<int64_t>();
  s.target_tokens = train.at("target").at("tokens").get<int64_t>();
  s.source_bytes = train.at("source").at("bytes").get<int64_t>();
  s.target_bytes = train.at("target").at("bytes").get<int64_t>();
  s.shard_bytes = train.at("source").at("shard_bytes").get<uint64_t>() +
                  train.at("target").at("shard_bytes").get<uint64_t>();
  return s;
}

DatasetStats from_shards(const fs::path& dir) {
  // Headers only matter here: skip the id range check of every token.
  Shard source((dir / "train.src.shard").string(), /*check_ids=*/false);
  Shard target((dir / "train.tgt.shard").string(), /*check_ids=*/false);
  DatasetStats s;
  s.origin = "shard headers";
  s.pairs = source.sentences();
  s.source_tokens = source.tokens();
  s.target_tokens = target.tokens();
  s.shard_bytes = source.file_bytes() + target.file_bytes();
  return s;
}

}  // namespace

std::optional<DatasetStats> read_dataset_stats(const DataConfig& data) {
  if (data.train_is_synthetic()) return std::nullopt;
  fs::path dir(data.train);
  DatasetStats stats;
  try {
    stats = from_report(dir / "report.json");
  } catch (const std::exception& report_error) {
    try {
      stats = from_shards(dir);
    } catch (const std::exception& shard_error) {
      throw std::runtime_error("dataset statistics of " + data.train + ": " + report_error.what() +
                               "; " + shard_error.what());
    }
  }
  stats.directory = data.train;
  return stats;
}

nlohmann::json to_json(const std::optional<DatasetStats>& stats) {
  if (!stats) return nullptr;
  auto optional = [](const std::optional<int64_t>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
  };
  return {{"directory", stats->directory},
          {"origin", stats->origin},
          {"pairs", stats->pairs},
          {"source_tokens", stats->source_tokens},
          {"target_tokens", stats->target_tokens},
          {"source_bytes", optional(stats->source_bytes)},
          {"target_bytes", optional(stats->target_bytes)},
          {"shard_bytes", stats->shard_bytes}};
}

}  // namespace nmt
