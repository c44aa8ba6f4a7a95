// Reading report.json of an nmt-prep directory and matching shards to their vocabulary.
#include "engine/train/prepared_dir.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/config/json_limits.h"

namespace nmt {

namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

nlohmann::json read_prep_report(const fs::path& dir) {
  fs::path path = dir / "report.json";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("data directory " + dir.string() +
                             ": no report.json (is it a directory written by nmt-prep?)");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json report = parse_json_bounded(text.str(), path.string());
  if (report.is_discarded()) throw std::runtime_error(path.string() + ": not valid JSON");
  if (!report.is_object())
    throw std::runtime_error(path.string() +
                             ": not a JSON object (is it a directory written by nmt-prep?)");
  return report;
}

std::string prep_report_string(const nlohmann::json& report, const fs::path& dir,
                               std::initializer_list<const char*> keys) {
  const nlohmann::json* node = &report;
  std::string dotted;
  for (const char* key : keys) {
    if (!dotted.empty()) dotted += '.';
    dotted += key;
    if (!node->is_object() || !node->contains(key)) {
      node = nullptr;
      break;
    }
    node = &(*node)[key];
  }
  if (node == nullptr || !node->is_string())
    throw std::runtime_error((dir / "report.json").string() + ": no " + dotted +
                             " (is it a directory written by this version of nmt-prep?)");
  return node->get<std::string>();
}

void check_shard_vocabulary(const Shard& shard, const Vocab& vocab, const std::string& vocab_file,
                            const std::string& hint) {
  if (shard.vocab_size() == vocab.size() && shard.vocab_fingerprint() == vocab.fingerprint())
    return;
  std::string detail = shard.vocab_size() != vocab.size()
                           ? "a vocabulary of " + std::to_string(shard.vocab_size()) +
                                 " entries, " + vocab_file + " has " + std::to_string(vocab.size())
                           : "vocabulary fingerprint " + hex64(shard.vocab_fingerprint()) + ", " +
                                 vocab_file + " has " + hex64(vocab.fingerprint()) +
                                 " (same size, other pieces)";
  throw std::runtime_error(shard.path() + " was encoded with another vocabulary than " +
                           vocab_file + " (" + detail + "): " + hint);
}

}  // namespace nmt
