// Loading a RunConfig: reading the JSON file (errors with line and column), walking its sections
// through the schema, `--set` overrides, validation; and writing the resolved config back as JSON.
#include "engine/config/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/config/config_schema.h"
#include "engine/config/json_limits.h"

namespace nmt {
namespace {

using nlohmann::json;

std::string read_config_file(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw ConfigError("config file not found: " + path);
  }
  if (std::filesystem::is_directory(path, error)) {
    throw ConfigError("config path is a directory, not a JSON file: " + path);
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file.good() && !file.eof()) throw ConfigError("cannot read config file: " + path);
  return text.str();
}

// nlohmann reports the byte offset of the last character it read (1-based); editors want the line
// and column of that character.
std::string describe_position(const std::string& text, size_t byte) {
  const size_t index = std::min(byte == 0 ? 0 : byte - 1, text.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(index - line_start + 1);
}

// nlohmann's message without its "[json.exception...] parse error at line 3, column 5: " prefix,
// which repeats (and for old versions, lacks) the position we print ourselves.
std::string parse_error_detail(const json::parse_error& error) {
  const std::string what = error.what();
  const size_t parse_error_at = what.find("parse error");
  const size_t colon = what.find(": ", parse_error_at == std::string::npos ? 0 : parse_error_at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// Parses JSON with // and /* */ comments; a key repeated in one object is an error rather than the
// silent "last one wins" of the JSON spec.
json parse_config_text(const std::string& text, const std::string& path) {
  std::vector<std::set<std::string>> seen_keys;  // one set per open object
  std::vector<std::string> key_path;             // the current key of each open object
  auto check_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    // Bounded nesting: printing or destroying a value nested a million levels deep would
    // overflow the stack.
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw ConfigError(json_too_deep_message(path));
    switch (event) {
      case json::parse_event_t::object_start:
        seen_keys.emplace_back();
        key_path.emplace_back();
        break;
      case json::parse_event_t::object_end:
        seen_keys.pop_back();
        key_path.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string name = parsed.get<std::string>();
        key_path.back() = name;
        if (!seen_keys.back().insert(name).second) {
          std::string full;
          for (const std::string& part : key_path) full += (full.empty() ? "" : ".") + part;
          throw ConfigError(path + ": duplicate key " + shorten_for_message(full));
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, check_duplicates, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const json::parse_error& error) {
    throw ConfigError(path + ", " + describe_position(text, error.byte) +
                      ": invalid JSON: " + parse_error_detail(error));
  }
}

// Starts from the defaults and sets every key the JSON names, checking each one.
RunConfig config_from_json_unvalidated(const json& root, std::string_view origin) {
  if (!root.is_object()) {
    throw ConfigError(std::string(origin) +
                      ": the top level must be a JSON object of sections, "
                      "{\"model\": {\"d_model\": 512}, ...}, got " +
                      format_config_value(root));
  }
  RunConfig cfg;
  for (const auto& [section_name, section] : root.items()) {
    if (find_config_section(section_name) == nullptr) {
      throw ConfigError(unknown_key_message(origin, section_name, ""));
    }
    if (!section.is_object()) {
      throw ConfigError(std::string(origin) + ": section " + section_name +
                        " must be a JSON object of keys, got " + format_config_value(section));
    }
    for (const auto& [key_name, value] : section.items()) {
      const ConfigKey* key = find_config_key(section_name, key_name);
      if (key == nullptr) throw ConfigError(unknown_key_message(origin, section_name, key_name));
      key->set(cfg, check_key_value(*key, value, origin));
    }
  }
  return cfg;
}

}  // namespace

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& sets) {
  const std::string text = read_config_file(path);
  RunConfig cfg = config_from_json_unvalidated(parse_config_text(text, path), path);
  for (const std::string& assignment : sets) apply_config_override(cfg, assignment);
  validate_run_config(cfg, sets.empty() ? path : path + " with --set overrides");
  return cfg;
}

RunConfig run_config_from_json(const json& root, std::string_view origin) {
  RunConfig cfg = config_from_json_unvalidated(root, origin);
  validate_run_config(cfg, origin);
  return cfg;
}

void apply_config_override(RunConfig& cfg, std::string_view assignment) {
  const std::string origin = "--set " + shorten_for_message(std::string(assignment));
  const size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    throw ConfigError(origin + ": expected section.key=value, e.g. --set model.d_model=256");
  }
  const std::string_view path = assignment.substr(0, equals);
  const std::string_view text = assignment.substr(equals + 1);
  const size_t dot = path.find('.');
  if (dot == std::string_view::npos) throw ConfigError(unknown_key_message(origin, path, ""));
  const std::string_view section = path.substr(0, dot);
  const std::string_view name = path.substr(dot + 1);
  const ConfigKey* key = find_config_key(section, name);
  if (key == nullptr) throw ConfigError(unknown_key_message(origin, section, name));
  key->set(cfg, parse_key_text(*key, text, origin));
}

void validate_run_config(const RunConfig& cfg, std::string_view origin) {
  // Per-key checks first: a config built in code may hold anything.
  for (const ConfigKey& key : config_keys()) check_key_value(key, key.get(cfg), origin);
  for (const CrossKeyRule& rule : cross_key_rules()) {
    const std::string violation = rule.violation(cfg);
    if (!violation.empty()) throw ConfigError(std::string(origin) + ": " + violation);
  }
}

std::optional<double> parse_max_time(std::string_view text) {
  // Digits only, then the parts: [D-]H:MM:SS, M:SS or S; minutes and seconds below 60 after the
  // first part.
  auto number = [](std::string_view digits) -> std::optional<int64_t> {
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    int64_t value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  int64_t days = 0;
  if (const size_t dash = text.find('-'); dash != std::string_view::npos) {
    std::optional<int64_t> d = number(text.substr(0, dash));
    if (!d) return std::nullopt;
    days = *d;
    text.remove_prefix(dash + 1);
    if (std::count(text.begin(), text.end(), ':') != 2) return std::nullopt;
  }
  std::vector<int64_t> parts;
  for (size_t start = 0;;) {
    const size_t colon = text.find(':', start);
    std::optional<int64_t> part = number(text.substr(start, colon - start));
    if (!part || (!parts.empty() && *part >= 60)) return std::nullopt;
    parts.push_back(*part);
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return std::nullopt;
  int64_t seconds = 0;
  for (int64_t part : parts) seconds = seconds * 60 + part;  // H:MM:SS, M:SS or S
  seconds += days * 86400;
  if (seconds <= 0) return std::nullopt;
  return static_cast<double>(seconds);
}

json to_json(const RunConfig& cfg) {
  json root = json::object();
  for (const ConfigKey& key : config_keys()) root[key.section][key.name] = key.get(cfg);
  return root;
}

std::string format_run_config(const RunConfig& cfg) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const ConfigKey& key : config_keys()) {
    root[key.section][key.name] = nlohmann::ordered_json::parse(key.get(cfg).dump());
  }
  return root.dump(2) + "\n";
}

}  // namespace nmt
