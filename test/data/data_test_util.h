// Helpers for the data suites: small file helpers (scratch directories and expected-exception
// messages come from test/support/lib/scratch_dir.h).
#pragma once

#include <unistd.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test/support/lib/scratch_dir.h"

namespace nmt::test {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The first `count` lines of a file (each with its '\n').
inline std::vector<std::string> head_lines(const std::string& path, size_t count) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (lines.size() < count && std::getline(in, line)) lines.push_back(line);
  return lines;
}

inline std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  return text;
}

}  // namespace nmt::test
