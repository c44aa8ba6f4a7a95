// save_checkpoint: stage into a temporary directory, fsync, rename; then best.json and pruning.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "data/crc32c.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_finite.h"
#include "engine/checkpoint/checkpoint_layout.h"
#include "engine/checkpoint/checkpoint_links.h"
#include "engine/checkpoint/safetensors.h"

namespace nmt {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

void check_inputs(const ParamStore& params, const Tensor& adam_m, const Tensor& adam_v,
                  const CheckpointState& state, int64_t keep) {
  if (state.step < 0) throw std::invalid_argument("save_checkpoint: negative step");
  if (keep < 0) throw std::invalid_argument("save_checkpoint: negative keep");
  if (params.total_elements() > 0 && params.master().empty())
    throw std::invalid_argument("save_checkpoint: the parameter store is not finalized");
  if (adam_m.empty() != adam_v.empty())
    throw std::invalid_argument("save_checkpoint: pass both Adam moments or neither");
  for (const Tensor* t : {&adam_m, &adam_v})
    if (!t->empty() && (t->numel() != params.total_elements() || t->dtype != DType::f32))
      throw std::invalid_argument("save_checkpoint: Adam moment " + t->shape_string() +
                                  " does not match the " + std::to_string(params.total_elements()) +
                                  " parameters (f32)");
}

// A diverged run's weights are never saved: they would load and make every later step a skip.
void throw_if_non_finite(const std::vector<float>& host, const ParamStore& params,
                         const std::string& suffix, const std::string& path) {
  std::string problem = describe_non_finite(host, params, suffix);
  if (!problem.empty())
    throw NonFiniteTensorError("not saving " + path + ": " + problem + " (the run has diverged)");
}

// Writes `flat` (laid out like the parameter store) as one tensor per parameter, named
// "<param name><suffix>".
SafetensorsFileInfo write_flat(const std::string& path, const ParamStore& params,
                               const Tensor& flat, const std::string& suffix,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<float> host = copy_to_host(flat);
  throw_if_non_finite(host, params, suffix, path);
  std::vector<SafetensorsTensor> tensors;
  for (const Param* p : ordered_params(params))
    tensors.push_back({p->name + suffix, p->shape, host.data() + p->offset});
  return write_safetensors(path, tensors, metadata);
}

void record_file(nlohmann::json& files, const std::string& name, const SafetensorsFileInfo& info) {
  files[name] = {{"bytes", info.bytes}, {"crc32c", crc32c_hex(info.crc32c)}};
}

// Removes the temporary and superseded directories (and links) of earlier saves that crashed (one
// writer per checkpoint directory, so no other save can be in progress).
void remove_leftovers(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    bool leftover = name.starts_with(".ckpt-") && (name.find(".tmp-") != std::string::npos ||
                                                   name.find(".old-") != std::string::npos);
    // A directory, or a link of checkpoint_links.h (which may dangle): remove_all drops the link.
    if (leftover && (e.is_directory(ec) || e.is_symlink(ec))) fs::remove_all(e.path(), ec);
  }
}

bool improves(const CheckpointMetric& candidate, const std::optional<BestCheckpoint>& best) {
  if (!std::isfinite(candidate.value)) return false;
  if (!best || best->metric.name != candidate.name || !fs::is_directory(best->path)) return true;
  return candidate.higher_is_better ? candidate.value > best->metric.value
                                    : candidate.value < best->metric.value;
}

// Renames the staged directory into place. A checkpoint of the same step (a re-save after resume)
// is moved aside first, as rename cannot replace a non-empty directory.
void publish(const std::string& dir, const std::string& staged, const std::string& final_path,
             int64_t step) {
  std::string aside = dir + "/.ckpt-" + std::to_string(step) + ".old-" + std::to_string(::getpid());
  bool replaced = fs::exists(final_path);
  if (replaced && std::rename(final_path.c_str(), aside.c_str()) != 0)
    throw CheckpointError("cannot move the old " + final_path + " aside: " + std::strerror(errno));
  if (std::rename(staged.c_str(), final_path.c_str()) != 0)
    throw CheckpointError("cannot rename " + staged + " to " + final_path + ": " +
                          std::strerror(errno));
  fsync_directory(dir);
  std::error_code ec;
  if (replaced) fs::remove_all(aside, ec);
}

void prune(const std::string& dir, int64_t keep, int64_t saved_step,
           const std::optional<BestCheckpoint>& best, SavedCheckpoint& result) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (auto step = step_of_checkpoint_name(e.path().filename().string());
        step && e.is_directory(ec))
      steps.push_back(*step);
  if (keep == 0) return;
  std::sort(steps.rbegin(), steps.rend());
  std::set<int64_t> kept(steps.begin(), steps.begin() + std::min<size_t>(steps.size(), keep));
  kept.insert(saved_step);
  if (best) kept.insert(best->step);
  for (int64_t step : steps) {
    if (kept.count(step)) continue;
    std::string path = dir + "/" + checkpoint_dir_name(step);
    fs::remove_all(path, ec);
    if (ec)
      result.warnings.push_back("cannot remove old checkpoint " + path + ": " + ec.message());
    else
      result.removed.push_back(path);
  }
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) {
  return "ckpt-" + std::to_string(step);
}

SavedCheckpoint save_checkpoint(const std::string& dir, const ParamStore& params,
                                const Tensor& adam_m, const Tensor& adam_v,
                                const CheckpointState& state, const RunConfig& cfg, int64_t keep,
                                const std::optional<CheckpointMetric>& metric) {
  auto start = std::chrono::steady_clock::now();
  check_inputs(params, adam_m, adam_v, state, keep);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw CheckpointError("cannot create checkpoint directory " + dir + ": " +
                          (ec ? ec.message() : std::string("a file of that name exists")));
  remove_leftovers(dir);

  SavedCheckpoint result;
  result.path = dir + "/" + checkpoint_dir_name(state.step);
  std::string staged =
      dir + "/.ckpt-" + std::to_string(state.step) + ".tmp-" + std::to_string(::getpid());
  if (!fs::create_directory(staged, ec) || ec)
    throw CheckpointError("cannot create " + staged + ": " +
                          (ec ? ec.message() : std::string("it exists")));
  try {
    CheckpointState saved = state;
    if (!saved.vocab_path.empty()) {
      CopiedVocabulary copy = copy_vocabulary_into(saved.vocab_path, staged);
      saved.vocab_file = copy.file;
      saved.vocab_crc32c = copy.crc32c;
      result.files[copy.file] = fs::file_size(staged + "/" + copy.file);
      result.bytes += result.files[copy.file];
    }
    nlohmann::json files = nlohmann::json::object();
    std::map<std::string, std::string> model_meta = {
        {"format", "pt"},  // what safetensors.torch writes: a PyTorch state dict
        {"producer", "nmt"},
        {"step", std::to_string(state.step)},
        {"model_config", to_json(cfg)["model"].dump()}};
    auto aliases = tied_aliases(cfg.model, params);
    if (!aliases.empty()) model_meta[kAliasesKey] = nlohmann::json(aliases).dump();
    record_file(files, kModelFile,
                write_flat(staged + "/" + kModelFile, params, params.master(), "", model_meta));
    if (!adam_m.empty()) {
      std::map<std::string, std::string> opt_meta = {
          {"producer", "nmt"},
          {"step", std::to_string(state.step)},
          {"optimizer", std::string(config_name(cfg.optimizer.name))}};
      std::vector<float> m = copy_to_host(adam_m);
      std::vector<float> v = copy_to_host(adam_v);
      throw_if_non_finite(m, params, kFirstMomentSuffix, staged + "/" + kOptimizerFile);
      throw_if_non_finite(v, params, kSecondMomentSuffix, staged + "/" + kOptimizerFile);
      std::vector<SafetensorsTensor> tensors;
      for (const Param* p : ordered_params(params)) {
        tensors.push_back({p->name + kFirstMomentSuffix, p->shape, m.data() + p->offset});
        tensors.push_back({p->name + kSecondMomentSuffix, p->shape, v.data() + p->offset});
      }
      record_file(files, kOptimizerFile,
                  write_safetensors(staged + "/" + kOptimizerFile, tensors, opt_meta));
    }
    nlohmann::json state_json = state_to_json(saved, cfg, metric);
    state_json["files"] = files;
    std::string text = state_json.dump(2) + "\n";
    DurableFile state_file(staged + "/" + kStateFile);
    state_file.write(text.data(), text.size());
    state_file.sync_and_close();
    fsync_directory(staged);
    for (auto& [name, record] : files.items()) {
      result.files[name] = record["bytes"].get<uint64_t>();
      result.bytes += result.files[name];
    }
    result.files[kStateFile] = text.size();
    result.bytes += text.size();
    publish(dir, staged, result.path, state.step);
  } catch (...) {
    fs::remove_all(staged, ec);
    throw;
  }

  std::optional<BestCheckpoint> best;
  try {
    best = read_best_checkpoint(dir);
  } catch (const CheckpointError& e) {
    result.warnings.push_back(std::string(e.what()) + " (replaced)");
  }
  if (metric && improves(*metric, best)) {
    best = BestCheckpoint{state.step, result.path, *metric};
    nlohmann::json record = {{"step", state.step},
                             {"checkpoint", checkpoint_dir_name(state.step)},
                             {"metric", metric_to_json(*metric)}};
    write_file_atomically(dir + "/" + kBestFile, record.dump(2) + "\n");
    result.is_best = true;
  }
  // The two links are updated independently: a `last` that cannot be replaced (say, a directory
  // of that name) must not leave `best` pointing at a checkpoint the pruning below removes.
  std::string link_problem =
      update_checkpoint_link(dir, kLastLink, checkpoint_dir_name(state.step));
  if (!link_problem.empty()) result.warnings.push_back(link_problem);
  if (best && fs::is_directory(best->path)) {
    link_problem = update_checkpoint_link(dir, kBestLink, checkpoint_dir_name(best->step));
    if (!link_problem.empty()) result.warnings.push_back(link_problem);
  }
  prune(dir, keep, state.step, best, result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace nmt
