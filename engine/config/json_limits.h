// Limits on the JSON the tools read from files a person or another program wrote (configs,
// state.json, report.json, best.json, safetensors headers): nesting depth is bounded, so a value
// nested a million levels deep is an error message rather than a stack overflow while it is
// printed or destroyed; and values quoted in messages are cut to a readable length.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace nmt {

// Deeper than any file the engine writes (state.json nests about 5 levels).
inline constexpr int kMaxJsonDepth = 64;
// Characters of a value quoted in an error message.
inline constexpr size_t kMaxQuotedChars = 120;

// `text` cut to kMaxQuotedChars, with how much was left out: `"xxxx..." (1000002 characters)`.
inline std::string shorten_for_message(const std::string& text,
                                       size_t max_chars = kMaxQuotedChars) {
  if (text.size() <= max_chars) return text;
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return text.substr(0, cut) + "... (" + std::to_string(text.size()) + " characters)";
}

// Thrown by parse_json_bounded; the message names `origin`.
class JsonTooDeep : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string json_too_deep_message(std::string_view origin) {
  return std::string(origin) + ": values nested deeper than " + std::to_string(kMaxJsonDepth) +
         " levels";
}

// json::parse(text) with the nesting depth bounded. Returns a discarded value on a syntax error
// (like parse(text, nullptr, false)); throws JsonTooDeep past kMaxJsonDepth levels.
inline nlohmann::json parse_json_bounded(std::string_view text, std::string_view origin) {
  auto bound = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    if ((event == nlohmann::json::parse_event_t::object_start ||
         event == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw JsonTooDeep(json_too_deep_message(origin));
    return true;
  };
  return nlohmann::json::parse(text, bound, /*allow_exceptions=*/false);
}

}  // namespace nmt
