// nmt-bleu: scores a detokenized hypothesis file against one or more reference files with BLEU or
// chrF, printing the same numbers and signature as sacreBLEU 2.x (or one JSON object).
// Exit codes: 0 scored; 1 the score could not be written; 2 usage or input error (a missing or
// unreadable file, line counts that differ, invalid UTF-8).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/cli_exit.h"
#include "data/bleu.h"
#include "data/bleu_io.h"
#include "data/chrf.h"

namespace {

constexpr int kExitInputError = nmt::kExitUsageError;

// The signature's key:value pairs as JSON fields, as sacreBLEU's JSON output has them.
void add_signature_fields(nlohmann::json& out, const std::string& signature) {
  size_t start = 0;
  while (start <= signature.size()) {
    size_t end = signature.find('|', start);
    if (end == std::string::npos) end = signature.size();
    const std::string pair = signature.substr(start, end - start);
    const size_t colon = pair.find(':');
    if (colon != std::string::npos) out[pair.substr(0, colon)] = pair.substr(colon + 1);
    start = end + 1;
  }
}

nlohmann::json bleu_json(const nmt::BleuStats& bleu) {
  nlohmann::json out;
  out["name"] = "BLEU";
  out["score"] = bleu.score;
  out["signature"] = bleu.signature();
  out["verbose_score"] = bleu.verbose();
  out["counts"] = bleu.counts;
  out["totals"] = bleu.totals;
  out["precisions"] = bleu.precisions;
  out["bp"] = bleu.bp;
  out["ratio"] = bleu.ratio();
  out["sys_len"] = bleu.sys_len;
  out["ref_len"] = bleu.ref_len;
  add_signature_fields(out, bleu.signature());
  return out;
}

nlohmann::json chrf_json(const nmt::ChrfStats& chrf) {
  nlohmann::json out;
  out["name"] = chrf.name();
  out["score"] = chrf.score;
  out["signature"] = chrf.signature();
  out["stats"] = chrf.stats;
  out["beta"] = chrf.options.beta;
  add_signature_fields(out, chrf.signature());
  return out;
}

struct Arguments {
  std::vector<std::string> ref_paths;
  std::string hyp_path;
  std::string metric = "bleu";
  std::string tokenize = "13a";
  bool lowercase = false;
  bool json = false;
  int width = 2;
  nmt::ChrfOptions chrf;
};

int run(const Arguments& args) {
  const std::vector<std::string> hyps = nmt::read_metric_lines(args.hyp_path);
  std::vector<std::vector<std::string>> ref_streams;
  for (const std::string& path : args.ref_paths) {
    ref_streams.push_back(nmt::read_metric_lines(path));
    if (ref_streams.back().size() != hyps.size()) {
      throw std::invalid_argument("line count mismatch: " + args.hyp_path + " has " +
                                  std::to_string(hyps.size()) + " lines but " + path + " has " +
                                  std::to_string(ref_streams.back().size()));
    }
  }
  if (hyps.empty()) throw std::invalid_argument(args.hyp_path + " has no lines to score");

  if (args.metric == "bleu") {
    nmt::BleuOptions options;
    options.tokenizer = nmt::parse_bleu_tokenizer(args.tokenize);
    options.lowercase = args.lowercase;
    const nmt::BleuStats bleu = nmt::corpus_bleu(hyps, ref_streams, options);
    if (args.json) {
      std::cout << bleu_json(bleu).dump(1) << "\n";
    } else {
      std::cout << bleu.format(args.width) << "\n" << bleu.signature() << "\n";
    }
  } else {
    nmt::ChrfOptions options = args.chrf;
    options.lowercase = args.lowercase;
    const nmt::ChrfStats chrf = nmt::corpus_chrf(hyps, ref_streams, options);
    if (args.json) {
      std::cout << chrf_json(chrf).dump(1) << "\n";
    } else {
      std::cout << chrf.format(args.width) << "\n" << chrf.signature() << "\n";
    }
  }
  // A score nobody received (a full disk, a closed pipe) is a failure, not a success.
  errno = 0;
  std::cout.flush();
  if (!std::cout) {
    std::fprintf(stderr, "nmt-bleu: error: cannot write the score to standard output%s%s\n",
                 errno ? ": " : "", errno ? std::strerror(errno) : "");
    return nmt::kExitRuntimeError;
  }
  return nmt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sacreBLEU-identical BLEU and chrF of a detokenized hypothesis file (one segment "
      "per line) against reference files with the same number of lines."};
  Arguments args;
  app.add_option("--ref,-r", args.ref_paths, "reference file; repeat for several references")
      ->required();
  app.add_option("--hyp,-i", args.hyp_path, "hypothesis file")->required();
  app.add_option("--metric,-m", args.metric, "bleu or chrf")
      ->check(CLI::IsMember({"bleu", "chrf"}))
      ->capture_default_str();
  app.add_option("--tokenize,-t", args.tokenize, "BLEU tokenizer: 13a, intl, none or char")
      ->check(CLI::IsMember({"13a", "intl", "none", "char"}))
      ->capture_default_str();
  app.add_flag("--lowercase", args.lowercase, "case-insensitive scores");
  app.add_flag("--json", args.json, "print one JSON object (full-precision score)");
  app.add_option("--width,-w", args.width, "decimals of the printed score")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
  app.add_option("--chrf-char-order", args.chrf.char_order, "chrF character n-gram order")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--chrf-word-order", args.chrf.word_order, "chrF word n-gram order (2: chrF++)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--chrf-beta", args.chrf.beta, "chrF recall weight")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.footer(
      "Exit codes: 0 scored; 1 the score could not be written; 2 usage or input error (missing "
      "file, line counts differ, invalid UTF-8).");
  nmt::add_version_flag(app, "nmt-bleu");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;

  try {
    return run(args);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nmt-bleu: error: %s\n", error.what());
    return kExitInputError;
  }
}
