// Checkpoint naming, aliases, state.json (de)serialisation and host staging.
#include "engine/checkpoint/checkpoint_layout.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "data/crc32c.h"
#include "kernels/elementwise.h"

namespace nmt::checkpoint_layout {
namespace {

[[noreturn]] void bad_key(const std::string& origin, const std::string& key, const char* want) {
  throw CheckpointError(origin + ": key '" + key + "' is missing or not " + want);
}

int64_t get_int(const nlohmann::json& j, const std::string& key, const std::string& origin) {
  if (!j.contains(key) || !j[key].is_number_integer()) bad_key(origin, key, "an integer");
  return j[key].get<int64_t>();
}

}  // namespace

std::vector<const Param*> ordered_params(const ParamStore& params) {
  std::vector<const Param*> out;
  for (const Param& p : params.params()) out.push_back(&p);
  return out;
}

std::map<std::string, std::string> tied_aliases(const ModelConfig& model,
                                                const ParamStore& params) {
  std::map<std::string, std::string> aliases;
  const std::string table = "encoder.embed_tokens.weight";
  if (!model.shared_embeddings || !params.find(table)) return aliases;
  for (const char* alias : {"decoder.embed_tokens.weight", "decoder.output_projection.weight"})
    if (!params.find(alias)) aliases[alias] = table;
  return aliases;
}

std::map<std::string, std::string> parse_aliases(const std::map<std::string, std::string>& metadata,
                                                 const std::string& origin) {
  std::map<std::string, std::string> aliases;
  auto it = metadata.find(kAliasesKey);
  if (it == metadata.end() || it->second.empty()) return aliases;
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object())
    throw CheckpointError(origin + ": __metadata__ 'aliases' is not a JSON object");
  for (auto a = j.begin(); a != j.end(); ++a) {
    if (!a.value().is_string())
      throw CheckpointError(origin + ": alias '" + a.key() + "' does not name a tensor");
    aliases[a.key()] = a.value().get<std::string>();
  }
  return aliases;
}

nlohmann::json metric_to_json(const CheckpointMetric& metric) {
  return {{"name", metric.name},
          {"value", metric.value},
          {"higher_is_better", metric.higher_is_better}};
}

CheckpointMetric metric_from_json(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object() || !json.contains("value") || !json["value"].is_number())
    throw CheckpointError(origin + ": metric is not {\"name\", \"value\", \"higher_is_better\"}");
  CheckpointMetric m;
  m.name = json.value("name", std::string("metric"));
  m.value = json["value"].get<double>();
  m.higher_is_better = json.value("higher_is_better", true);
  return m;
}

nlohmann::json state_to_json(const CheckpointState& state, const RunConfig& cfg,
                             const std::optional<CheckpointMetric>& metric) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  nlohmann::json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["step"] = state.step;
  j["epoch"] = state.epoch;
  j["data_position"] = state.data_position;
  j["seed"] = state.seed;
  j["loss_scale"] = state.loss_scale;
  j["lr_schedule"] = state.lr_schedule;
  j["vocab"] = state.vocab_path.empty() ? nlohmann::json(nullptr)
                                        : nlohmann::json{{"file", state.vocab_file},
                                                         {"path", state.vocab_path},
                                                         {"crc32c", state.vocab_crc32c}};
  j["metric"] = metric ? metric_to_json(*metric) : nlohmann::json(nullptr);
  j["extra"] = state.extra;
  j["config"] = to_json(cfg);
  j["saved_unix_time"] = std::chrono::duration<double>(now).count();
  return j;
}

LoadedCheckpoint state_from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw CheckpointError(origin + ": not a JSON object");
  if (j.value("format", std::string()) != kFormat)
    throw CheckpointError(origin + ": not an nmt checkpoint state (format is not \"" +
                          std::string(kFormat) + "\")");
  int64_t version = get_int(j, "format_version", origin);
  if (version != kFormatVersion)
    throw CheckpointError(origin + ": format_version " + std::to_string(version) +
                          " is not supported (this build reads " + std::to_string(kFormatVersion) +
                          ")");
  LoadedCheckpoint out;
  CheckpointState& s = out.state;
  s.step = get_int(j, "step", origin);
  s.epoch = get_int(j, "epoch", origin);
  s.data_position = j.value("data_position", nlohmann::json());
  if (!j.contains("seed") || !j["seed"].is_number_unsigned())
    bad_key(origin, "seed", "an unsigned integer");
  s.seed = j["seed"].get<uint64_t>();
  if (!j.contains("loss_scale") || !j["loss_scale"].is_number())
    bad_key(origin, "loss_scale", "a number");
  s.loss_scale = j["loss_scale"].get<double>();
  s.lr_schedule = j.value("lr_schedule", nlohmann::json());
  if (j.contains("vocab") && j["vocab"].is_object()) {
    s.vocab_path = j["vocab"].value("path", std::string());
    s.vocab_crc32c = j["vocab"].value("crc32c", std::string());
    s.vocab_file = j["vocab"].value("file", std::string());
    if (s.vocab_file.find('/') != std::string::npos || s.vocab_file == "." ||
        s.vocab_file == "..")
      throw CheckpointError(origin + ": vocab.file \"" + s.vocab_file +
                            "\" is not a file name inside the checkpoint");
  }
  s.extra = j.value("extra", nlohmann::json());
  if (j.contains("metric") && !j["metric"].is_null())
    out.metric = metric_from_json(j["metric"], origin);
  if (!j.contains("config") || !j["config"].is_object()) bad_key(origin, "config", "an object");
  try {
    out.config = run_config_from_json(j["config"], origin + " config");
  } catch (const ConfigError& e) {
    throw CheckpointError(e.what());
  }
  if (!j.contains("files") || !j["files"].is_object()) bad_key(origin, "files", "an object");
  out.has_optimizer = j["files"].contains(kOptimizerFile);
  return out;
}

std::vector<float> copy_to_host(const Tensor& flat) {
  std::vector<float> host(static_cast<size_t>(flat.numel()));
  Tensor view(host.data(), DType::f32, Device::cpu, {flat.numel()});
  copy_tensor(flat.reshaped({flat.numel()}), view);
  return host;
}

void copy_from_host(const std::vector<float>& host, const Tensor& flat) {
  Tensor src(const_cast<float*>(host.data()), DType::f32, Device::cpu, {flat.numel()});
  Tensor dst = flat.reshaped({flat.numel()});
  copy_tensor(src, dst);
}

CopiedVocabulary copy_vocabulary_into(const std::string& source, const std::string& dir) {
  std::string name = std::filesystem::path(source).filename().string();
  if (name.empty() || name == kModelFile || name == kOptimizerFile || name == kStateFile)
    name = "vocab-" + name;
  std::string bytes;
  try {
    bytes = read_text_file(source);
  } catch (const CheckpointError& e) {
    throw CheckpointError(std::string("checkpoint vocabulary: ") + e.what());
  }
  DurableFile copy(dir + "/" + name);
  copy.write(bytes.data(), bytes.size());
  copy.sync_and_close();
  return {name, crc32c_hex(copy.crc32c())};
}

std::optional<int64_t> step_of_checkpoint_name(const std::string& name) {
  const std::string prefix = "ckpt-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() > prefix.size() + 18)
    return std::nullopt;
  std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

}  // namespace nmt::checkpoint_layout
