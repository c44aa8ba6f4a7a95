// Reading checkpoints back: state.json, file size and checksum checks, model/checkpoint matching
// with every difference listed, loading into the parameter store and Adam moments, finding the
// newest complete checkpoint and the best one.
#include <algorithm>
#include <filesystem>
#include <set>

#include "data/crc32c.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_finite.h"
#include "engine/checkpoint/checkpoint_layout.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/config/json_limits.h"

namespace nmt {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

constexpr size_t kMaxListedDifferences = 40;

// A JSON file of a checkpoint directory, its nesting bounded (discarded when not JSON).
nlohmann::json parse_checkpoint_json(const std::string& file) {
  try {
    return parse_json_bounded(read_text_file(file), file);
  } catch (const JsonTooDeep& e) {
    throw CheckpointError(e.what());
  }
}

nlohmann::json read_state_json(const std::string& path) {
  std::string file = path + "/" + kStateFile;
  if (!fs::is_directory(path)) throw CheckpointError("checkpoint " + path + " is not a directory");
  nlohmann::json j = parse_checkpoint_json(file);
  if (j.is_discarded()) throw CheckpointError(file + ": not valid JSON (truncated or corrupt)");
  return j;
}

// Opens one file the state lists, checking its size (truncation) before its header and its CRC32C
// (corruption) after.
SafetensorsReader open_verified(const std::string& path, const std::string& name,
                                const nlohmann::json& files) {
  std::string file = path + "/" + name;
  std::string state_file = path + "/" + kStateFile;
  if (!files.contains(name)) throw CheckpointError(state_file + " lists no " + name);
  const nlohmann::json& record = files[name];
  if (!record.is_object() || !record.contains("bytes") || !record["bytes"].is_number_unsigned() ||
      !record.contains("crc32c") || !record["crc32c"].is_string())
    throw CheckpointError(state_file + ": files." + name + " is not {\"bytes\", \"crc32c\"}");
  std::error_code ec;
  uint64_t size = fs::file_size(file, ec);
  if (ec) throw CheckpointError("cannot read " + file + ": " + ec.message());
  uint64_t expected = record["bytes"].get<uint64_t>();
  if (size != expected)
    throw CheckpointError(file + " is truncated or was changed: " + std::to_string(size) +
                          " bytes, " + kStateFile + " records " + std::to_string(expected));
  SafetensorsReader reader(file);
  std::string crc = crc32c_hex(reader.file_crc32c());
  if (crc != record["crc32c"].get<std::string>())
    throw CheckpointError(file + " is corrupt: its crc32c is " + crc + ", " + kStateFile +
                          " records " + record["crc32c"].get<std::string>());
  return reader;
}

// The tensor that holds parameter `name` + suffix: by its own name, else through an alias.
const SafetensorsTensorInfo* resolve(const SafetensorsReader& reader, const std::string& name,
                                     const std::string& suffix,
                                     const std::map<std::string, std::string>& aliases) {
  if (const SafetensorsTensorInfo* t = reader.find(name + suffix)) return t;
  auto alias = aliases.find(name);
  return alias == aliases.end() ? nullptr : reader.find(alias->second + suffix);
}

// Every way the file's tensors differ from the model's parameters, each parameter looked for
// under every suffix (empty: they match).
std::vector<std::string> differences(const SafetensorsReader& reader, const ParamStore& params,
                                     const std::vector<std::string>& suffixes,
                                     const std::map<std::string, std::string>& aliases) {
  std::vector<std::string> out;
  std::set<std::string> used;
  for (const std::string& suffix : suffixes) {
    for (const Param* p : ordered_params(params)) {
      std::string name = p->name + suffix;
      const SafetensorsTensorInfo* t = resolve(reader, p->name, suffix, aliases);
      if (!t) {
        out.push_back("missing from the checkpoint: " + name + " " + shape_to_string(p->shape));
        continue;
      }
      used.insert(t->name);
      if (t->dtype != "F32")
        out.push_back(name + ": saved as " + t->dtype + ", the model needs F32");
      else if (t->shape != p->shape)
        out.push_back(name + ": saved " + shape_to_string(t->shape) + " vs model " +
                      shape_to_string(p->shape));
    }
  }
  for (const SafetensorsTensorInfo& t : reader.tensors())
    if (!used.count(t.name))
      out.push_back("not in the model: " + t.name + " " + shape_to_string(t.shape));
  return out;
}

void throw_mismatch(const std::string& file, const std::vector<std::string>& diffs,
                    const RunConfig& saved, const RunConfig* expected) {
  std::string message = file + " does not match the model (" + std::to_string(diffs.size()) +
                        (diffs.size() == 1 ? " difference):" : " differences):");
  for (size_t i = 0; i < diffs.size() && i < kMaxListedDifferences; ++i)
    message += "\n  " + diffs[i];
  if (diffs.size() > kMaxListedDifferences)
    message += "\n  ... and " + std::to_string(diffs.size() - kMaxListedDifferences) + " more";
  if (expected) {
    std::string changes;
    for (const std::string& c : describe_config_changes(saved, *expected))
      if (c.starts_with("model.")) changes += "\n  " + c;
    if (!changes.empty()) message += "\nmodel config changes:" + changes;
  }
  throw CheckpointError(message);
}

// The tensors of one file in the parameter store's flat layout, checked to be finite: a diverged
// run's checkpoint would load and skip every later step as an overflow.
std::vector<float> read_flat(const SafetensorsReader& reader, const ParamStore& params,
                             const std::string& suffix,
                             const std::map<std::string, std::string>& aliases) {
  std::vector<float> host(static_cast<size_t>(params.total_elements()));
  for (const Param* p : ordered_params(params))
    reader.read_f32(resolve(reader, p->name, suffix, aliases)->name, p->shape,
                    host.data() + p->offset);
  std::string problem = describe_non_finite(host, params, suffix);
  if (!problem.empty())
    throw NonFiniteTensorError(reader.path() + ": " + problem +
                               ": the checkpoint was saved by a diverged run; move it away to "
                               "resume from an earlier one");
  return host;
}

void check_moment(const Tensor& t, const ParamStore& params, const char* which) {
  if (t.empty() || t.dtype != DType::f32 || t.numel() != params.total_elements())
    throw std::invalid_argument(std::string("load_checkpoint: Adam ") + which + " moment " +
                                t.shape_string() + " does not match the " +
                                std::to_string(params.total_elements()) + " parameters (f32)");
}

LoadedCheckpoint load(const std::string& path, ParamStore& params, const Tensor* adam_m,
                      const Tensor* adam_v, const RunConfig* expected) {
  nlohmann::json state = read_state_json(path);
  LoadedCheckpoint out = state_from_json(state, path + "/" + kStateFile);
  out.path = path;
  if (adam_m) {
    check_moment(*adam_m, params, "first");
    check_moment(*adam_v, params, "second");
    if (!out.has_optimizer)
      throw CheckpointError("checkpoint " + path + " has no " + kOptimizerFile +
                            " (weights only): it cannot resume the optimizer");
  }
  // Everything is checked before anything is copied: a failed load leaves the model as it was.
  SafetensorsReader model = open_verified(path, kModelFile, state["files"]);
  auto aliases = parse_aliases(model.metadata(), model.path());
  if (auto diffs = differences(model, params, {""}, aliases); !diffs.empty())
    throw_mismatch(model.path(), diffs, out.config, expected);
  std::optional<SafetensorsReader> optimizer;
  if (adam_m) {
    optimizer.emplace(open_verified(path, kOptimizerFile, state["files"]));
    std::vector<std::string> diffs =
        differences(*optimizer, params, {kFirstMomentSuffix, kSecondMomentSuffix}, aliases);
    if (!diffs.empty()) throw_mismatch(optimizer->path(), diffs, out.config, expected);
  }
  std::vector<float> weights = read_flat(model, params, "", aliases), first, second;
  if (adam_m) {
    first = read_flat(*optimizer, params, kFirstMomentSuffix, aliases);
    second = read_flat(*optimizer, params, kSecondMomentSuffix, aliases);
  }
  copy_from_host(weights, params.master());
  params.sync_compute();
  if (adam_m) {
    copy_from_host(first, *adam_m);
    copy_from_host(second, *adam_v);
  }
  return out;
}

}  // namespace

LoadedCheckpoint read_checkpoint_state(const std::string& path) {
  LoadedCheckpoint out = state_from_json(read_state_json(path), path + "/" + kStateFile);
  out.path = path;
  return out;
}

LoadedCheckpoint load_checkpoint(const std::string& path, ParamStore& params, const Tensor& adam_m,
                                 const Tensor& adam_v, const RunConfig& expected) {
  return load(path, params, &adam_m, &adam_v, &expected);
}

LoadedCheckpoint load_model_weights(const std::string& path, ParamStore& params) {
  return load(path, params, nullptr, nullptr, nullptr);
}

void validate_checkpoint(const std::string& path) {
  nlohmann::json state = read_state_json(path);
  LoadedCheckpoint info = state_from_json(state, path + "/" + kStateFile);
  auto named_step = step_of_checkpoint_name(fs::path(path).filename().string());
  if (named_step && *named_step != info.state.step)
    throw CheckpointError(path + "/" + kStateFile + " records step " +
                          std::to_string(info.state.step) + ", the directory name another");
  if (!state["files"].contains(kModelFile))
    throw CheckpointError(path + "/" + kStateFile + " lists no " + kModelFile);
  for (auto& [name, record] : state["files"].items()) open_verified(path, name, state["files"]);
  if (!info.state.vocab_file.empty()) {
    info.path = path;
    const std::string vocab = checkpoint_vocabulary_file(info);
    std::string crc;
    try {
      crc = crc32c_hex(crc32c_of_file(vocab));
    } catch (const std::runtime_error& e) {
      throw CheckpointError("checkpoint vocabulary: " + std::string(e.what()));
    }
    if (crc != info.state.vocab_crc32c)
      throw CheckpointError(vocab + " is corrupt: its crc32c is " + crc + ", " + kStateFile +
                            " records " + info.state.vocab_crc32c);
  }
}

std::string checkpoint_vocabulary_file(const LoadedCheckpoint& ckpt) {
  if (!ckpt.state.vocab_file.empty()) return ckpt.path + "/" + ckpt.state.vocab_file;
  return ckpt.state.vocab_path;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir, std::ostream& warnings) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::vector<std::pair<int64_t, std::string>> candidates;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (auto step = step_of_checkpoint_name(e.path().filename().string());
        step && e.is_directory(ec))
      candidates.emplace_back(*step, e.path().string());
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [step, path] : candidates) {
    try {
      validate_checkpoint(path);
      return path;
    } catch (const std::exception& e) {
      warnings << "warning: skipping checkpoint " << path << ": " << e.what() << "\n";
    }
  }
  return std::nullopt;
}

std::optional<BestCheckpoint> read_best_checkpoint(const std::string& dir) {
  std::string file = dir + "/" + kBestFile;
  if (!fs::exists(file)) return std::nullopt;
  nlohmann::json j = parse_checkpoint_json(file);
  if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() ||
      !j.contains("metric"))
    throw CheckpointError(file + ": not {\"step\", \"checkpoint\", \"metric\"}");
  BestCheckpoint best;
  best.step = j["step"].get<int64_t>();
  best.path = dir + "/" + checkpoint_dir_name(best.step);
  best.metric = metric_from_json(j["metric"], file);
  return best;
}

std::vector<std::string> describe_config_changes(const RunConfig& saved, const RunConfig& now) {
  nlohmann::json a = to_json(saved).flatten(), b = to_json(now).flatten();
  std::set<std::string> keys;
  for (auto& [k, v] : a.items()) keys.insert(k);
  for (auto& [k, v] : b.items()) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& pointer : keys) {
    nlohmann::json va = a.value(pointer, nlohmann::json()), vb = b.value(pointer, nlohmann::json());
    if (va == vb) continue;
    std::string key = pointer.substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    out.push_back(key + ": saved " + va.dump() + ", now " + vb.dump());
  }
  return out;
}

void check_checkpoint_vocabulary(const CheckpointState& state, const std::string& vocab_path) {
  if (state.vocab_crc32c.empty()) return;
  std::string crc;
  try {
    crc = crc32c_hex(crc32c_of_file(vocab_path));
  } catch (const std::runtime_error& e) {
    throw CheckpointError(std::string("vocabulary check: ") + e.what());
  }
  if (crc != state.vocab_crc32c)
    throw CheckpointError("vocabulary " + vocab_path + " (crc32c " + crc +
                          ") is not the one the checkpoint was trained with (" + state.vocab_path +
                          ", crc32c " + state.vocab_crc32c + ")");
}

}  // namespace nmt
