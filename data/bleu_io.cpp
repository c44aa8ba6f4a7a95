// Line reader for metric input files: validates UTF-8 per line so errors name the line.
#include "data/bleu_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "data/bleu_text.h"

namespace nmt {

std::vector<std::string> read_metric_lines(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw std::runtime_error("cannot read " + path + ": it is a directory");
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return read_metric_lines(file, path);
}

std::vector<std::string> read_metric_lines(std::istream& in, const std::string& path) {
  std::ostringstream contents;
  if (in.peek() != std::char_traits<char>::eof()) contents << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  const std::string bytes = contents.str();

  std::vector<std::string> lines;
  std::u32string decoded;
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line(bytes.data() + start, end - start);
    size_t bad_offset = 0;
    if (!bleu_text::try_decode_utf8(line, decoded, bad_offset)) {
      throw std::invalid_argument(path + " line " + std::to_string(lines.size() + 1) +
                                  ": invalid UTF-8 at byte " + std::to_string(bad_offset + 1));
    }
    lines.push_back(bleu_text::encode_utf8(bleu_text::python_rstrip(decoded)));
    start = end + 1;
  }
  return lines;
}

}  // namespace nmt
