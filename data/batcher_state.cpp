// The batchers' deterministic random keys, the resumable position as JSON, and option names.
#include <cstdio>
#include <stdexcept>

#include "data/batcher.h"
#include "data/corpus_io.h"

namespace nmt {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t first_epoch_key(uint64_t seed) {
  uint64_t state = seed ^ 0x6e6d742d62617463ULL;  // keeps seed 0 away from the all-zero state
  return splitmix64(state);
}

uint64_t next_epoch_key(uint64_t key) {
  uint64_t state = key;
  return splitmix64(state);
}

LengthPolicy parse_length_policy(std::string_view name) {
  if (name == "drop") return LengthPolicy::kDrop;
  if (name == "truncate") return LengthPolicy::kTruncate;
  throw std::invalid_argument("unknown length policy '" + std::string(name) +
                              "' (expected drop or truncate)");
}

std::string length_policy_name(LengthPolicy policy) {
  return policy == LengthPolicy::kDrop ? "drop" : "truncate";
}

uint64_t TokenBatcher::schedule_hash() const {
  // Everything that shapes the global schedule; seed and rank are not (the key carries the seed,
  // and every rank shares one schedule).
  const auto& o = options_;
  const std::string shape =
      std::to_string(o.max_tokens) + "/" + std::to_string(o.max_sentences) + "/" +
      std::to_string(o.window) + "/" + std::to_string(o.pad_multiple) + "/" +
      std::to_string(o.max_src_len) + "/" + std::to_string(o.max_tgt_len) + "/" +
      length_policy_name(o.length_policy) + "/" + std::to_string(o.world_size);
  return fnv1a64(shape);
}

namespace {

// 64-bit values travel as hex strings: JSON readers that use doubles would round them.
std::string to_hex(uint64_t v) {
  char text[19];
  std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(v));
  return text;
}

uint64_t from_hex(const nlohmann::json& j, const char* key) {
  const auto& value = j.at(key);
  if (!value.is_string())
    throw std::runtime_error("batcher position: '" + std::string(key) +
                             "' must be a hex string like 0x0123abcd");
  const std::string text = value.get<std::string>();
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.size() < 3 || text.compare(0, 2, "0x") != 0)
    throw std::runtime_error("batcher position: '" + std::string(key) +
                             "' is not a hex number: " + text);
  return v;
}

int64_t integer(const nlohmann::json& j, const char* key) {
  const auto& value = j.at(key);
  if (!value.is_number_integer())
    throw std::runtime_error("batcher position: '" + std::string(key) + "' must be an integer");
  return value.get<int64_t>();
}

}  // namespace

void to_json(nlohmann::json& j, const BatcherPosition& p) {
  j = {{"epoch", p.epoch},
       {"batch", p.batch},
       {"rng", to_hex(p.rng)},
       {"corpus_size", p.corpus_size},
       {"schedule", to_hex(p.schedule)}};
}

void from_json(const nlohmann::json& j, BatcherPosition& p) {
  if (!j.is_object()) throw std::runtime_error("batcher position: expected a JSON object");
  for (const char* key : {"epoch", "batch", "rng", "corpus_size", "schedule"})
    if (!j.contains(key))
      throw std::runtime_error("batcher position: missing key '" + std::string(key) + "'");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key != "epoch" && key != "batch" && key != "rng" && key != "corpus_size" &&
        key != "schedule")
      throw std::runtime_error("batcher position: unknown key '" + key + "'");
  }
  p.epoch = integer(j, "epoch");
  p.batch = integer(j, "batch");
  p.rng = from_hex(j, "rng");
  p.corpus_size = integer(j, "corpus_size");
  p.schedule = from_hex(j, "schedule");
}

}  // namespace nmt
