// nmt-bleu: scores a detokenized hypothesis against one or more references with BLEU and chrF,
// printing what sacreBLEU 2.6 prints for the same command line (docs/scoring.md):
//   nmt-bleu REF [REF...] [-i HYP] [-m bleu chrf] [-tok 13a] [-lc] [-f json|text] [-b] [-w 1]
// (the hypothesis from stdin without -i). The older form keeps its output (a score line and the
// signature, or one JSON object with every statistic):
//   nmt-bleu --ref REF [--ref REF...] --hyp HYP [--metric bleu|chrf] [--json] [-w 2]
// Exit codes: 0 scored; 1 the score could not be written; 2 usage or input error (a missing or
// unreadable file, line counts that differ, invalid UTF-8, a sacreBLEU option not supported).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/cli_exit.h"
#include "apps/nmt-bleu/sacrebleu_args.h"
#include "apps/nmt-bleu/score_output.h"
#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/chrf.h"

namespace {

struct Arguments {
  std::vector<std::string> refs;         // positional, as sacreBLEU takes them
  std::vector<std::string> legacy_refs;  // --ref/-r
  std::vector<std::string> inputs;       // -i/--input/--hyp; none: stdin
  std::vector<std::string> metrics{"bleu"};
  std::string tokenize = "13a";
  bool lowercase = false;
  bool json = false;  // the older --json
  std::string format;
  bool score_only = false;
  std::optional<int> width;
  int num_refs = 1;
  std::string encoding = "utf-8";
  std::string smooth = "exp";
  nmt::ChrfOptions chrf;
};

std::vector<std::vector<std::string>> read_references(const std::vector<std::string>& paths,
                                                      const std::string& hyp_name, size_t lines) {
  std::vector<std::vector<std::string>> streams;
  for (const std::string& path : paths) {
    streams.push_back(nmt::read_metric_lines(path));
    if (streams.back().size() != lines)
      throw std::invalid_argument("line count mismatch: " + hyp_name + " has " +
                                  std::to_string(lines) + " lines but " + path + " has " +
                                  std::to_string(streams.back().size()));
  }
  return streams;
}

int run(Arguments args) {
  const bool legacy = !args.legacy_refs.empty();
  if (legacy && !args.refs.empty())
    throw std::invalid_argument("give the references either as arguments or with --ref, not both");
  if (!legacy && args.refs.empty())
    throw std::invalid_argument("no reference file: nmt-bleu REF [REF...] -i HYP (or --ref REF)");
  for (const std::string& metric : args.metrics)
    if (metric != "bleu" && metric != "chrf")
      throw std::invalid_argument("-m " + metric + ": not supported (metrics: bleu, chrf)");
  if (args.tokenize != "13a" && args.tokenize != "intl" && args.tokenize != "none" &&
      args.tokenize != "char")
    throw std::invalid_argument("--tokenize " + args.tokenize +
                                ": not supported (tokenizers: 13a, intl, none, char)");
  if (args.inputs.size() > 1)
    throw std::invalid_argument(
        "-i/--input: several systems are not supported (sacreBLEU's multi-system mode); score "
        "one hypothesis file per call");
  if (args.num_refs != 1)
    throw std::invalid_argument("--num-refs " + std::to_string(args.num_refs) +
                                ": tab-separated references are not supported; give one "
                                "reference file per reference");
  if (args.encoding != "utf-8" && args.encoding != "utf8" && args.encoding != "UTF-8")
    throw std::invalid_argument("--encoding " + args.encoding + ": only UTF-8 is supported");
  if (args.smooth != "exp")
    throw std::invalid_argument("--smooth-method " + args.smooth +
                                ": only exp (sacreBLEU's default) is supported");
  // Like sacreBLEU, SACREBLEU_FORMAT overrides -f (not for the older --ref form).
  if (const char* env = std::getenv("SACREBLEU_FORMAT"); env && !legacy) {
    const std::string value = env;
    if (value == "json" || value == "text") args.format = value;
  }
  if (args.format == "latex")
    throw std::invalid_argument(
        "-f latex: sacreBLEU prints LaTeX tables in multi-system mode "
        "only, which is not supported");

  const std::string hyp_name = args.inputs.empty() ? "standard input" : args.inputs[0];
  const std::vector<std::string> hyps = args.inputs.empty()
                                            ? nmt::read_metric_lines(std::cin, hyp_name)
                                            : nmt::read_metric_lines(args.inputs[0]);
  const auto ref_streams =
      read_references(legacy ? args.legacy_refs : args.refs, hyp_name, hyps.size());
  if (hyps.empty()) throw std::invalid_argument(hyp_name + " has no lines to score");

  const std::set<std::string> metrics(args.metrics.begin(), args.metrics.end());  // BLEU first
  nmt::BleuStats bleu;
  nmt::ChrfStats chrf;
  std::vector<nmt::MetricResult> results;
  if (metrics.count("bleu")) {
    nmt::BleuOptions options;
    options.tokenizer = nmt::parse_bleu_tokenizer(args.tokenize);
    options.lowercase = args.lowercase;
    bleu = nmt::corpus_bleu(hyps, ref_streams, options);
    results.push_back({&bleu, nullptr});
  }
  if (metrics.count("chrf")) {
    // The older form lowercased chrF with --lowercase too; sacreBLEU's -lc is BLEU's only.
    if (legacy && args.lowercase) args.chrf.lowercase = true;
    chrf = nmt::corpus_chrf(hyps, ref_streams, args.chrf);
    results.push_back({nullptr, &chrf});
  }

  std::string text;
  if (legacy && args.format.empty() && !args.score_only) {
    if (results.size() != 1)
      throw std::invalid_argument("--ref with several metrics: add -f json or -f text");
    text = nmt::format_legacy(results[0], args.json, args.width.value_or(2));
  } else {
    const auto format = args.format == "text" ? nmt::ScoreFormat::text : nmt::ScoreFormat::json;
    text = nmt::format_sacrebleu(results, format, args.width.value_or(1), args.score_only);
  }
  // A score nobody received (a full disk, a closed pipe) is a failure, not a success.
  errno = 0;
  std::cout << text << std::flush;
  if (!std::cout) {
    std::fprintf(stderr, "nmt-bleu: error: cannot write the score to standard output%s%s\n",
                 errno ? ": " : "", errno ? std::strerror(errno) : "");
    return nmt::kExitRuntimeError;
  }
  return nmt::kExitOk;
}

void add_options(CLI::App& app, Arguments& args) {
  app.add_option("refs", args.refs, "reference files (sacreBLEU's form), before -i");
  app.add_option("--ref,-r", args.legacy_refs, "reference file, the older form; repeatable");
  app.add_option("--input,-i,--hyp", args.inputs, "hypothesis file (default: standard input)");
  app.add_option("--metrics,-m,--metric", args.metrics, "bleu, chrf or both")
      ->capture_default_str();
  app.add_option("--tokenize,-t", args.tokenize, "BLEU tokenizer: 13a, intl, none or char (-tok)")
      ->capture_default_str();
  app.add_flag("--lowercase", args.lowercase, "case-insensitive BLEU (-lc)");
  app.add_option("--format,-f", args.format, "json (default) or text, as sacreBLEU")
      ->check(CLI::IsMember({"json", "text", "latex"}));
  app.add_flag("--score-only,-b", args.score_only, "print the score alone");
  app.add_option("--width,-w", args.width, "decimals (default 1; 2 with --ref)")
      ->check(CLI::Range(0, 10));
  app.add_flag("--json", args.json, "with --ref: one JSON object with every statistic");
  app.add_option("--chrf-char-order", args.chrf.char_order, "chrF character n-gram order (-cc)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--chrf-word-order", args.chrf.word_order,
                 "chrF word n-gram order, 2: chrF++ (-cw)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--chrf-beta", args.chrf.beta, "chrF recall weight")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_flag("--chrf-lowercase", args.chrf.lowercase, "case-insensitive chrF");
  app.add_flag("--chrf-whitespace", args.chrf.whitespace, "keep whitespace in chrF n-grams");
  app.add_flag("--chrf-eps-smoothing", args.chrf.eps_smoothing, "chrF++.py-style smoothing");
  app.add_option("--num-refs", args.num_refs, "1 (tab-separated references: not supported)");
  app.add_option("--encoding,-e", args.encoding, "utf-8 (the only one supported)");
  app.add_option("--smooth-method,-s", args.smooth, "exp (the only one supported)");
  bool ignored = false;
  app.add_flag("--quiet,-q", ignored, "accepted for sacreBLEU scripts (nmt-bleu logs nothing)");
  app.add_flag("--no-color", ignored, "accepted for sacreBLEU scripts (no colors used)");
  app.add_flag("--force", ignored, "accepted for sacreBLEU scripts");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sacreBLEU-identical BLEU and chrF of a detokenized hypothesis (one segment per line) "
      "against reference files with the same number of lines; sacreBLEU's command line."};
  Arguments args;
  add_options(app, args);
  nmt::add_version_flag(app, "nmt-bleu");
  app.footer(
      "Not supported (an error names them): built-in test sets (-t/-l/--echo/...), TER, "
      "sentence-level scores, confidence intervals and paired tests, several systems, "
      "tab-separated references (see docs/scoring.md).\nExit codes: 0 scored; 1 the score could "
      "not be written; 2 usage or input error (missing file, line counts differ, invalid UTF-8, "
      "unsupported option).");
  std::vector<std::string> arguments;
  try {
    arguments = nmt::sacrebleu_arguments(argc, argv);
  } catch (const nmt::UnsupportedOption& e) {
    std::fprintf(stderr, "nmt-bleu: error: %s\n", e.what());
    return nmt::kExitUsageError;
  }
  std::reverse(arguments.begin(), arguments.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(arguments);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? nmt::kExitOk : nmt::kExitUsageError;
  }
  try {
    return run(args);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nmt-bleu: error: %s\n", error.what());
    return nmt::kExitUsageError;
  }
}
