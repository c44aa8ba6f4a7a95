// The config schema: one ConfigKey per `section.key` (type, range or allowed values, one doc line,
// and how to read/write its RunConfig field), the cross-key rules, and the checks that turn a JSON
// value or a `--set` string into a validated field value. The table itself is config_keys.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.h"

namespace nmt {

enum class KeyType : uint8_t { boolean, integer, number, string, choice };

// Allowed interval of a numeric key; infinite ends are unbounded.
struct KeyRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // true: min itself is excluded
  bool max_open = false;

  bool contains(double value) const;
  std::string describe(bool integer) const;  // "[1, 64]", "[0, 1)", ">= 0", "> 0"
};

struct ConfigKey {
  std::string section;  // "model"
  std::string name;     // "d_model"
  KeyType type = KeyType::integer;
  KeyRange range;                    // integer and number keys
  std::vector<std::string> choices;  // choice keys: the allowed spellings, in documentation order
  std::string doc;                   // one line
  // The field's value as JSON: bool, integer, double or string (choice keys: their spelling).
  std::function<nlohmann::json(const RunConfig&)> get;
  // Writes a value that check_key_value has accepted.
  std::function<void(RunConfig&, const nlohmann::json&)> set;

  std::string path() const { return section + "." + name; }
};

struct ConfigSection {
  std::string name;
  std::string doc;
};

// A rule between keys: its documentation line and a check returning "" or the violation message.
struct CrossKeyRule {
  std::string doc;
  std::function<std::string(const RunConfig&)> violation;
};

const std::vector<ConfigSection>& config_sections();  // documentation order
const std::vector<ConfigKey>& config_keys();          // documentation order, grouped by section
const std::vector<CrossKeyRule>& cross_key_rules();

const ConfigSection* find_config_section(std::string_view name);  // nullptr when unknown
const ConfigKey* find_config_key(std::string_view section, std::string_view name);

// The message for an unknown section (key empty) or key, with the closest known name by edit
// distance: "<origin>: unknown key 'model.d_modle' (did you mean 'model.d_model'?)".
std::string unknown_key_message(std::string_view origin, std::string_view section,
                                std::string_view key);

// Levenshtein distance (insert, delete, substitute; each costs 1).
int edit_distance(std::string_view a, std::string_view b);

// Checks a JSON value against the key (type, range, allowed values) and returns it normalised
// (an integral float such as 1e5 becomes an integer). Throws ConfigError naming origin and key.
nlohmann::json check_key_value(const ConfigKey& key, const nlohmann::json& value,
                               std::string_view origin);

// Parses the text of a `--set section.key=TEXT` with the key's type, then checks it as above.
nlohmann::json parse_key_text(const ConfigKey& key, std::string_view text, std::string_view origin);

std::string describe_type(const ConfigKey& key);     // "int", "float", "enum", ...
std::string describe_allowed(const ConfigKey& key);  // "[1, 64]", "`post`, `pre`", "true/false"
std::string format_config_value(const nlohmann::json& value);  // 1e-06, "post", true

}  // namespace nmt
