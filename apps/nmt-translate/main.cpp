// nmt-translate: translates UTF-8 text, one segment per line, with a checkpoint (docs/decoding.md).
//   nmt-translate --checkpoint DIR [-i in.txt] [-o out.txt] [--beam 4] [--nbest N]
//                 [--interactive] [--vocab PATH] [--alpha 0.6] [--max-len-a 1.5] [--max-len-b 10]
//                 [--step-rows N] [--device cpu|cuda]
// Reads stdin and writes stdout unless -i/-o name files. Batch mode (the default) translates the
// whole input, then writes it (nothing on failure); streaming mode (--interactive, or stdin a
// terminal) answers each line as it arrives. --nbest N prints N hypotheses per line as
// "ID ||| TEXT ||| SCORE" (Marian's n-best layout; ID counts input lines from 0).
// Exit codes: 0 translated; 1 runtime error (nothing written in batch mode); 2 usage error.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "apps/cli_exit.h"
#include "engine/checkpoint/checkpoint_links.h"
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

// One input line's output: the best translation, or with nbest > 0 its n-best list, one
// "ID ||| TEXT ||| SCORE" line per hypothesis.
std::string format_output(const std::vector<nmt::ScoredTranslation>& list, int64_t id, bool nbest) {
  if (!nbest) return list.front().text + "\n";
  std::string text;
  for (const nmt::ScoredTranslation& entry : list) {
    char score[32];
    std::snprintf(score, sizeof score, "%.6f", entry.score);
    text += std::to_string(id) + " ||| " + entry.text + " ||| " + score + "\n";
  }
  return text;
}

// Writes `text` to `path` through a temporary file and a rename: a failure leaves no partial file.
void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  std::error_code ec;
  if (out) std::filesystem::rename(temp, path, ec);
  if (!out || ec) {
    std::filesystem::remove(temp, ec);
    throw std::runtime_error("cannot write " + path);
  }
}

struct Io {
  std::string input, output;  // "" = stdin / stdout
  int nbest = 0;              // 0: the best translation only
  bool interactive = false;
};

int translate_batch(const nmt::TranslateOptions& options, const Io& io) {
  std::vector<std::string> lines;
  if (io.input.empty()) {
    lines = read_lines(std::cin);
    if (std::cin.bad()) throw std::runtime_error("cannot read standard input");
  } else {
    std::ifstream in(io.input, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open -i " + io.input);
    lines = read_lines(in);
    if (in.bad()) throw std::runtime_error("cannot read " + io.input);
  }
  nmt::Translator translator(options, &std::cerr);
  auto found = translator.translate(lines, std::max(io.nbest, 1), &std::cerr);
  // Written only once everything is translated: a failure leaves no partial output.
  std::string text;
  for (size_t i = 0; i < found.size(); ++i)
    text += format_output(found[i], static_cast<int64_t>(i), io.nbest > 0);
  if (!io.output.empty()) {
    write_file_atomically(io.output, text);
    return nmt::kExitOk;
  }
  std::cout << text << std::flush;
  if (!std::cout) throw std::runtime_error("cannot write standard output");
  return nmt::kExitOk;
}

// Streaming: each line translated and written (flushed) as soon as it is read.
int translate_stream(const nmt::TranslateOptions& options, const Io& io) {
  std::ifstream file;
  if (!io.input.empty()) {
    file.open(io.input, std::ios::binary);
    if (!file) throw std::runtime_error("cannot open -i " + io.input);
  }
  std::istream& in = io.input.empty() ? std::cin : file;
  // The checkpoint and vocabulary load first: a bad one must not have emptied the output file.
  nmt::Translator translator(options, &std::cerr);
  translator.plan_for_any_source();  // one plan for any line: no replanning while answering
  std::ofstream out_file;
  if (!io.output.empty()) {
    out_file.open(io.output, std::ios::binary | std::ios::trunc);
    if (!out_file) throw std::runtime_error("cannot write " + io.output);
  }
  std::ostream& out = io.output.empty() ? std::cout : out_file;
  if (::isatty(STDIN_FILENO) && io.input.empty())
    std::cerr << "nmt-translate: ready: one sentence per line, Ctrl-D to end\n" << std::flush;
  std::string line;
  for (int64_t id = 0; std::getline(in, line); ++id) {
    if (id == 0 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    auto found = translator.translate({line}, std::max(io.nbest, 1));
    out << format_output(found.front(), id, io.nbest > 0) << std::flush;
    if (!out)
      throw std::runtime_error("cannot write the translation of line " + std::to_string(id + 1));
  }
  if (in.bad()) throw std::runtime_error("cannot read the input");
  return nmt::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nmt-translate: translate text with a checkpoint (beam search)"};
  nmt::TranslateOptions options;
  Io io;
  std::string device;
  app.add_option("--checkpoint", options.checkpoint,
                 "checkpoint directory (ckpt-<step>), or a run's checkpoint.dir: its best "
                 "checkpoint, else its newest")
      ->required();
  app.add_option("-i,--input", io.input, "input file, one sentence per line (default: stdin)");
  app.add_option("-o,--output", io.output, "output file (default: stdout)");
  app.add_option("--nbest", io.nbest,
                 "print the N best hypotheses per line as 'ID ||| TEXT ||| SCORE' (N <= --beam)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--interactive", io.interactive,
               "answer each line as it arrives (on by itself when stdin is a terminal)");
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
                 "decoder rows per step: sentences * beam * prefix length (default: 16384 on a "
                 "GPU with 16 GiB free, else 4096)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--device", device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  std::string dtype;
  app.add_option("--dtype", dtype,
                 "f32, bf16 or f16: the weights and activations while decoding (default: bf16 on "
                 "cuda, f32 on cpu, the CPU's only one)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.footer(
      "Streaming mode (--interactive, or stdin a terminal) writes each translation as soon as its "
      "line is read.\nExit codes: 0 translated; 1 runtime error (nothing written in batch mode); "
      "2 usage error.");
  nmt::add_version_flag(app, "nmt-translate");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;
  if (!device.empty()) options.device = device == "cuda" ? nmt::Device::cuda : nmt::Device::cpu;
  if (!dtype.empty())
    options.dtype = dtype == "bf16"  ? nmt::DType::bf16
                    : dtype == "f16" ? nmt::DType::f16
                                     : nmt::DType::f32;
  std::error_code same_error;
  if (!io.input.empty() && !io.output.empty() &&
      (io.input == io.output || std::filesystem::equivalent(io.input, io.output, same_error))) {
    std::cerr << "nmt-translate: error: -o " << io.output
              << " is the input file (-i): the translation would overwrite it\n";
    return nmt::kExitUsageError;
  }
  if (io.nbest > options.beam.beam) {
    std::cerr << "nmt-translate: error: --nbest " << io.nbest << " exceeds --beam "
              << options.beam.beam << " (a beam keeps at most that many hypotheses)\n";
    return nmt::kExitUsageError;
  }

  try {
    options.checkpoint =
        nmt::resolve_checkpoint_argument(options.checkpoint, "nmt-translate", std::cerr);
    std::ios::sync_with_stdio(false);
    const bool streaming = io.interactive || (io.input.empty() && ::isatty(STDIN_FILENO));
    return streaming ? translate_stream(options, io) : translate_batch(options, io);
  } catch (const std::exception& e) {
    std::cerr << "nmt-translate: error: " << e.what() << "\n";
    return nmt::kExitRuntimeError;
  }
}
