// average_checkpoints: validate every input, check they hold one model, mean each tensor in double,
// write model.safetensors + state.json into a staged directory, rename it into place.
#include "engine/checkpoint/checkpoint_average.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/crc32c.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_layout.h"
#include "engine/checkpoint/safetensors.h"

namespace nmt {

namespace fs = std::filesystem;
using namespace checkpoint_layout;

namespace {

nlohmann::json read_json(const std::string& file) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(file), nullptr, false);
  if (j.is_discarded()) throw CheckpointError(file + ": not valid JSON (truncated or corrupt)");
  return j;
}

// Throws unless `other` holds exactly the tensors of `first` (names, dtype, shapes) and the same
// aliases.
void check_same_tensors(const SafetensorsReader& first, const SafetensorsReader& other) {
  for (const SafetensorsTensorInfo& t : first.tensors()) {
    const SafetensorsTensorInfo* o = other.find(t.name);
    if (!o)
      throw CheckpointError(other.path() + " has no tensor " + t.name + " (" + first.path() +
                            " has): not the same model");
    if (o->dtype != "F32" || o->shape != t.shape)
      throw CheckpointError(other.path() + ": " + t.name + " is " + o->dtype + " " +
                            shape_to_string(o->shape) + ", " + first.path() + " has " + t.dtype +
                            " " + shape_to_string(t.shape) + ": not the same model");
  }
  for (const SafetensorsTensorInfo& o : other.tensors())
    if (!first.find(o.name))
      throw CheckpointError(other.path() + " has a tensor " + o.name + " that " + first.path() +
                            " lacks: not the same model");
  if (parse_aliases(first.metadata(), first.path()) !=
      parse_aliases(other.metadata(), other.path()))
    throw CheckpointError(other.path() + " ties other tensors than " + first.path() +
                          " (metadata 'aliases' differ): not the same model");
}

}  // namespace

AveragedCheckpoint average_checkpoints(const std::vector<std::string>& checkpoints,
                                       const std::string& out) {
  if (checkpoints.empty()) throw std::invalid_argument("no checkpoints to average");
  if (out.empty()) throw std::invalid_argument("--out: not given");
  std::error_code ec;
  if (fs::exists(out, ec))
    throw std::invalid_argument("--out " + out + " exists: write the average to a new directory");

  std::vector<LoadedCheckpoint> states;
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  size_t newest = 0;
  for (const std::string& path : checkpoints) {
    validate_checkpoint(path);
    states.push_back(read_checkpoint_state(path));
    readers.push_back(std::make_unique<SafetensorsReader>(path + "/" + kModelFile));
    const LoadedCheckpoint& s = states.back();
    if (to_json(s.config)["model"] != to_json(states.front().config)["model"]) {
      std::string diff;
      for (const std::string& c : describe_config_changes(states.front().config, s.config))
        if (c.starts_with("model.")) diff += "\n  " + c;
      throw CheckpointError("checkpoint " + path + " is another model than " + checkpoints[0] +
                            " (\"saved\" is " + checkpoints[0] + "):" + diff);
    }
    check_same_tensors(*readers.front(), *readers.back());
    if (s.state.step > states[newest].state.step) newest = states.size() - 1;
  }

  // Mean per tensor, in double: the correctly rounded mean of the inputs.
  const SafetensorsReader& first = *readers.front();
  std::vector<std::vector<float>> means;
  std::vector<SafetensorsTensor> tensors;
  means.reserve(first.tensors().size());
  for (const SafetensorsTensorInfo& t : first.tensors()) {
    auto n = static_cast<size_t>(t.numel());
    std::vector<double> sum(n, 0.0);
    std::vector<float> values(n);
    for (const auto& reader : readers) {
      reader->read_f32(t.name, t.shape, values.data());
      for (size_t i = 0; i < n; ++i) sum[i] += static_cast<double>(values[i]);
    }
    const auto count = static_cast<double>(readers.size());
    for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(sum[i] / count);
    means.push_back(std::move(values));
    tensors.push_back({t.name, t.shape, means.back().data()});
  }

  nlohmann::json sources = checkpoints;
  std::map<std::string, std::string> metadata = first.metadata();
  metadata["producer"] = "nmt";
  metadata["step"] = std::to_string(states[newest].state.step);
  metadata["averaged_from"] = sources.dump();

  nlohmann::json state = read_json(checkpoints[newest] + "/" + kStateFile);
  state["metric"] = nullptr;  // the inputs' metrics describe other weights
  state["extra"] = {{"averaged_from", sources}};

  fs::path target(out);
  fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  std::string staged = out + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(staged, ec);
  if (!fs::create_directory(staged, ec) || ec)
    throw CheckpointError("cannot create " + staged + ": " +
                          (ec ? ec.message() : std::string("it exists")));
  try {
    // The newest input's vocabulary travels with the average (an input of an older build may only
    // name a path that is not there from here: the average then names it too).
    const std::string vocab = checkpoint_vocabulary_file(states[newest]);
    if (state["vocab"].is_object() && !vocab.empty() && fs::exists(vocab)) {
      CopiedVocabulary copy = copy_vocabulary_into(vocab, staged);
      // An input that names its vocabulary by path only: the file there must still be the one it
      // trained with (its recorded checksum), or the average would carry another vocabulary.
      const std::string recorded = states[newest].state.vocab_crc32c;
      if (!recorded.empty() && recorded != copy.crc32c)
        throw CheckpointError(checkpoints[newest] + ": its vocabulary " + vocab +
                              " has changed since it was saved (crc32c " + copy.crc32c +
                              ", recorded " + recorded + ")");
      state["vocab"]["file"] = copy.file;
      state["vocab"]["crc32c"] = copy.crc32c;
    }
    SafetensorsFileInfo info = write_safetensors(staged + "/" + kModelFile, tensors, metadata);
    state["files"] = {{kModelFile, {{"bytes", info.bytes}, {"crc32c", crc32c_hex(info.crc32c)}}}};
    std::string text = state.dump(2) + "\n";
    DurableFile file(staged + "/" + kStateFile);
    file.write(text.data(), text.size());
    file.sync_and_close();
    fsync_directory(staged);
    if (std::rename(staged.c_str(), out.c_str()) != 0)
      throw CheckpointError("cannot rename " + staged + " to " + out + ": " + std::strerror(errno));
    fsync_directory(parent.string());
  } catch (...) {
    fs::remove_all(staged, ec);
    throw;
  }
  return {out, states[newest].state.step, static_cast<int64_t>(tensors.size()), checkpoints};
}

std::vector<std::string> latest_checkpoints(const std::string& dir, int64_t count,
                                            std::ostream& warnings) {
  if (count < 1) throw std::invalid_argument("--last: must be at least 1");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw std::invalid_argument(dir + " is not a directory");
  std::vector<std::pair<int64_t, std::string>> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (auto step = step_of_checkpoint_name(e.path().filename().string());
        step && e.is_directory(ec))
      found.emplace_back(*step, e.path().string());
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (const auto& [step, path] : found) {
    if (static_cast<int64_t>(out.size()) == count) break;
    try {
      validate_checkpoint(path);
      out.push_back(path);
    } catch (const std::exception& e) {
      warnings << "warning: skipping checkpoint " << path << ": " << e.what() << "\n";
    }
  }
  if (static_cast<int64_t>(out.size()) < count)
    throw std::invalid_argument(dir + " holds " + std::to_string(out.size()) +
                                " complete checkpoints, fewer than the " + std::to_string(count) +
                                " to average");
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace nmt
