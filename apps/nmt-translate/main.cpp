// nmt-translate: translates UTF-8 text, one segment per line, from stdin to stdout with a
// checkpoint.
//   nmt-translate --checkpoint DIR [--vocab PATH] [--beam 4] [--alpha 0.6] [--max-len-a 1.5]
//                 [--max-len-b 10] [--step-rows N] [--device cpu|cuda] < in.txt > out.txt
// Exit codes: 0 translated; 1 runtime error (nothing written to stdout); 2 usage error.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "apps/cli_exit.h"
#include "engine/decode/decode_translate.h"

namespace {

// Lines of `in`, split at '\n' (a last line without '\n' counts); a UTF-8 byte order mark at the
// start is not part of the first line.
std::vector<std::string> read_lines(std::istream& in) {
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  if (!lines.empty() && lines.front().starts_with("\xEF\xBB\xBF")) lines.front().erase(0, 3);
  return lines;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nmt-translate: translate stdin to stdout with a checkpoint (beam search)"};
  nmt::TranslateOptions options;
  std::string device;
  app.add_option("--checkpoint", options.checkpoint, "checkpoint directory (ckpt-<step>)")
      ->required();
  app.add_option("--vocab", options.vocab,
                 "vocabulary file (default: the one recorded in the checkpoint)");
  app.add_option("--beam", options.beam.beam, "beam size; 1 = greedy")->capture_default_str();
  app.add_option("--alpha", options.beam.alpha, "length penalty exponent ((5+|Y|)/6)^alpha")
      ->capture_default_str();
  app.add_option("--max-len-a", options.beam.max_len_a,
                 "at most a * source tokens + b target tokens")
      ->capture_default_str();
  app.add_option("--max-len-b", options.beam.max_len_b, "see --max-len-a")->capture_default_str();
  app.add_option("--step-rows,--batch-tokens", options.step_rows,
                 "decoder rows per step: sentences * beam * prefix length")
      ->capture_default_str();
  app.add_option("--device", device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.footer("Exit codes: 0 translated; 1 runtime error (nothing written); 2 usage error.");
  nmt::add_version_flag(app, "nmt-translate");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;
  if (!device.empty()) options.device = device == "cuda" ? nmt::Device::cuda : nmt::Device::cpu;

  try {
    std::ios::sync_with_stdio(false);
    std::vector<std::string> lines = read_lines(std::cin);
    if (std::cin.bad()) throw std::runtime_error("cannot read standard input");
    std::vector<std::string> out = nmt::translate_lines(options, lines, &std::cerr);
    // Written only once everything is translated: a failure leaves no partial output.
    std::string text;
    for (const std::string& line : out) text += line + "\n";
    std::cout << text << std::flush;
    if (!std::cout) throw std::runtime_error("cannot write standard output");
  } catch (const std::exception& e) {
    std::cerr << "nmt-translate: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
