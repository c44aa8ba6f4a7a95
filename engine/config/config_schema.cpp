// Schema machinery: key lookup with "did you mean" suggestions, checking a JSON value or a `--set`
// string against a key's type and range, and how values and ranges are written in messages.
#include "engine/config/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/config/json_limits.h"

namespace nmt {
namespace {

using nlohmann::json;

// Shortest decimal text that reads back as the same double (1e-06, 0.997, 4096).
std::string format_number(double value, bool integer) {
  if ((integer || value == std::floor(value)) && std::abs(value) < 9.2e18) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char text[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof(text), "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// "in [0, 1)" for an interval, ">= 0" as it is.
std::string in_range(const std::string& range) {
  return range.starts_with('[') || range.starts_with('(') ? "in " + range : range;
}

std::string expected_text(const ConfigKey& key) {
  switch (key.type) {
    case KeyType::boolean:
      return "true or false";
    case KeyType::integer:
      return "an integer " + in_range(key.range.describe(true));
    case KeyType::number:
      return "a number " + in_range(key.range.describe(false));
    case KeyType::string:
      return "a string";
    case KeyType::choice: {
      std::string text = "one of ";
      for (size_t i = 0; i < key.choices.size(); ++i) {
        text += (i == 0 ? "\"" : ", \"") + key.choices[i] + "\"";
      }
      return text;
    }
  }
  return "";
}

[[noreturn]] void reject(std::string_view origin, const ConfigKey& key, const std::string& value,
                         std::string_view problem) {
  throw ConfigError(std::string(origin) + ": " + key.path() + " = " + value + " " +
                    std::string(problem) + ": expected " + expected_text(key));
}

// The name in `candidates` closest to `unknown`, or "" when none is close enough to be a typo.
std::string closest(std::string_view unknown, const std::vector<std::string>& candidates) {
  std::string best;
  int best_distance = std::max<int>(2, static_cast<int>(unknown.size()) / 3) + 1;
  for (const std::string& candidate : candidates) {
    const int distance = edit_distance(unknown, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

bool KeyRange::contains(double value) const {
  if (std::isnan(value)) return false;
  const bool above_min = min_open ? value > min : value >= min;
  const bool below_max = max_open ? value < max : value <= max;
  return above_min && below_max;
}

std::string KeyRange::describe(bool integer) const {
  const bool has_min = std::isfinite(min);
  const bool has_max = std::isfinite(max);
  if (has_min && has_max) {
    return std::string(min_open ? "(" : "[") + format_number(min, integer) + ", " +
           format_number(max, integer) + (max_open ? ")" : "]");
  }
  if (has_min) return std::string(min_open ? "> " : ">= ") + format_number(min, integer);
  if (has_max) return std::string(max_open ? "< " : "<= ") + format_number(max, integer);
  return "(any value)";
}

const ConfigSection* find_config_section(std::string_view name) {
  for (const ConfigSection& section : config_sections()) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

const ConfigKey* find_config_key(std::string_view section, std::string_view name) {
  for (const ConfigKey& key : config_keys()) {
    if (key.section == section && key.name == name) return &key;
  }
  return nullptr;
}

int edit_distance(std::string_view a, std::string_view b) {
  std::vector<int> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string unknown_key_message(std::string_view origin, std::string_view section_as_given,
                                std::string_view key_as_given) {
  // A name a megabyte long is quoted cut short (and not compared with every key).
  const std::string section_cut = shorten_for_message(std::string(section_as_given));
  const std::string key_cut = shorten_for_message(std::string(key_as_given));
  const std::string_view section = section_cut, key = key_cut;
  std::vector<std::string> section_names;
  for (const ConfigSection& s : config_sections()) section_names.push_back(s.name);
  const std::string prefix = std::string(origin) + ": ";

  if (key.empty()) {
    // A top-level name: a misspelt section, or a key written without its section.
    std::string suggestion;
    std::vector<std::string> key_names;
    for (const ConfigKey& k : config_keys()) {
      if (k.name == section && suggestion.empty()) suggestion = k.path();
      key_names.push_back(k.name);
    }
    if (suggestion.empty()) suggestion = closest(section, section_names);
    if (suggestion.empty()) {
      const std::string near_key = closest(section, key_names);
      for (const ConfigKey& k : config_keys()) {
        if (!near_key.empty() && k.name == near_key && suggestion.empty()) suggestion = k.path();
      }
    }
    return prefix + "unknown section " + std::string(section) +
           (suggestion.empty() ? " (sections: " + join(section_names) + ")"
                               : " (did you mean " + suggestion + "?)");
  }

  const std::string path = std::string(section) + "." + std::string(key);
  if (find_config_section(section) == nullptr) {
    std::vector<std::string> paths;
    for (const ConfigKey& k : config_keys()) paths.push_back(k.path());
    const std::string suggestion = closest(path, paths);
    return prefix + "unknown key " + path + ": there is no section " + std::string(section) +
           (suggestion.empty() ? " (sections: " + join(section_names) + ")"
                               : " (did you mean " + suggestion + "?)");
  }

  // Prefer a near name in the same section; else the same name in another section.
  std::vector<std::string> names_in_section;
  for (const ConfigKey& k : config_keys()) {
    if (k.section == section) names_in_section.push_back(k.name);
  }
  std::string suggestion = closest(key, names_in_section);
  if (!suggestion.empty()) suggestion = std::string(section) + "." + suggestion;
  for (const ConfigKey& k : config_keys()) {
    if (suggestion.empty() && k.name == key) suggestion = k.path();
  }
  return prefix + "unknown key " + path +
         (suggestion.empty()
              ? " (keys of " + std::string(section) + ": " + join(names_in_section) + ")"
              : " (did you mean " + suggestion + "?)");
}

json check_key_value(const ConfigKey& key, const json& value, std::string_view origin) {
  const std::string shown = format_config_value(value);
  switch (key.type) {
    case KeyType::boolean:
      if (!value.is_boolean()) reject(origin, key, shown, "has the wrong type");
      return value;
    case KeyType::integer: {
      if (!value.is_number()) reject(origin, key, shown, "has the wrong type");
      if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        reject(origin, key, shown, "is out of range");
      }
      const double as_double = value.get<double>();
      if (value.is_number_float() && as_double != std::floor(as_double)) {
        reject(origin, key, shown, "is not an integer");
      }
      if (std::abs(as_double) >= 9.2e18) reject(origin, key, shown, "is out of range");
      if (!key.range.contains(as_double)) reject(origin, key, shown, "is out of range");
      return value.is_number_float() ? json(static_cast<int64_t>(as_double))
                                     : json(value.get<int64_t>());
    }
    case KeyType::number: {
      if (!value.is_number()) reject(origin, key, shown, "has the wrong type");
      const double number = value.get<double>();
      if (!std::isfinite(number) || !key.range.contains(number)) {
        reject(origin, key, shown, "is out of range");
      }
      return json(number);
    }
    case KeyType::string:
      if (!value.is_string()) reject(origin, key, shown, "has the wrong type");
      return value;
    case KeyType::choice:
      if (!value.is_string()) reject(origin, key, shown, "has the wrong type");
      if (std::find(key.choices.begin(), key.choices.end(), value.get<std::string>()) ==
          key.choices.end()) {
        reject(origin, key, shown, "is not allowed");
      }
      return value;
  }
  return value;
}

json parse_key_text(const ConfigKey& key, std::string_view text, std::string_view origin) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  switch (key.type) {
    case KeyType::boolean:
      if (text == "true" || text == "1") return json(true);
      if (text == "false" || text == "0") return json(false);
      reject(origin, key, shorten_for_message(std::string(text)), "is not a bool");
    case KeyType::integer: {
      int64_t integer = 0;
      const auto [stop, error] = std::from_chars(begin, end, integer);
      if (error == std::errc() && stop == end && !text.empty()) {
        return check_key_value(key, json(integer), origin);
      }
      // 1e5 and friends: check_key_value accepts an integral number.
      double number = 0;
      const auto [number_stop, number_error] = std::from_chars(begin, end, number);
      if (number_error == std::errc() && number_stop == end && !text.empty()) {
        return check_key_value(key, json(number), origin);
      }
      if (error == std::errc::result_out_of_range) {
        reject(origin, key, shorten_for_message(std::string(text)), "is out of range");
      }
      reject(origin, key, shorten_for_message(std::string(text)), "is not an integer");
    }
    case KeyType::number: {
      double number = 0;
      const auto [stop, error] = std::from_chars(begin, end, number);
      if (error != std::errc() || stop != end || text.empty()) {
        reject(origin, key, shorten_for_message(std::string(text)), "is not a number");
      }
      return check_key_value(key, json(number), origin);
    }
    case KeyType::string:
    case KeyType::choice:
      return check_key_value(key, json(std::string(text)), origin);
  }
  return json();
}

std::string describe_type(const ConfigKey& key) {
  switch (key.type) {
    case KeyType::boolean:
      return "bool";
    case KeyType::integer:
      return "int";
    case KeyType::number:
      return "float";
    case KeyType::string:
      return "string";
    case KeyType::choice:
      return "enum";
  }
  return "";
}

std::string describe_allowed(const ConfigKey& key) {
  switch (key.type) {
    case KeyType::boolean:
      return "`true`, `false`";
    case KeyType::integer:
      return key.range.describe(true);
    case KeyType::number:
      return key.range.describe(false);
    case KeyType::string:
      return "any string";
    case KeyType::choice: {
      std::string text;
      for (const std::string& choice : key.choices)
        text += (text.empty() ? "`" : ", `") + choice + "`";
      return text;
    }
  }
  return "";
}

std::string format_config_value(const json& value) {
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (!std::isfinite(number)) return std::isnan(number) ? "nan" : (number > 0 ? "inf" : "-inf");
  }
  // Invalid UTF-8 (possible in a --set string) is shown replaced instead of throwing; a long
  // value is cut to a readable length.
  return shorten_for_message(value.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace nmt
