// sacreBLEU's command line, as far as nmt-bleu follows it: its single-dash long option names
// (-tok, -lc, -cw, ...) rewritten to the names nmt-bleu declares, and a clear error for each
// sacreBLEU option nmt-bleu does not support (test-set downloads, TER, confidence intervals, ...).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace nmt {

// A sacreBLEU option nmt-bleu does not support; what() names it and says what to do instead.
struct UnsupportedOption : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// argv with sacreBLEU's single-dash long names replaced by their double-dash forms ("-tok intl"
// -> "--tokenize intl", "-lc" -> "--lowercase"); throws UnsupportedOption for an option listed
// in docs/scoring.md as unsupported. Only an argument spelled exactly like one of those names
// (or NAME=VALUE) is rewritten.
std::vector<std::string> sacrebleu_arguments(int argc, char** argv);

}  // namespace nmt
