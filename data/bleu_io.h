// Reading hypothesis and reference files for BLEU/chrF the way sacreBLEU's command line does.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace nmt {

// The lines of a UTF-8 text file: split at '\n' only (a final '\n' ends the last line rather than
// starting an empty one), each right-stripped of whitespace (Python str.rstrip(), so "\r" goes
// too). Throws std::runtime_error naming the file if it cannot be read, and std::invalid_argument
// naming the file and line on invalid UTF-8.
std::vector<std::string> read_metric_lines(const std::string& path);
// The same from a stream (standard input); `name` stands for it in error messages.
std::vector<std::string> read_metric_lines(std::istream& in, const std::string& name);

}  // namespace nmt
