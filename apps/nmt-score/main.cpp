// nmt-score: the loss and the last-position logits of a checkpoint on sentence pairs, as JSON; the
// engine's side of the PyTorch cross-check (scripts/torch_crosscheck.py).
//   nmt-score --checkpoint DIR --src FILE --tgt FILE [--ids] [--vocab PATH] [--device cpu|cuda]
//             --out result.json
// Exit codes: 0 written; 1 runtime error (one message on stderr, no output file); 2 usage error.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "apps/cli_exit.h"
#include "apps/nmt-score/score.h"
#include "engine/checkpoint/checkpoint_links.h"

namespace {

// Temporary file + rename: a failure never leaves a half-written result.
void write_atomically(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::remove(temp.c_str());
      throw std::runtime_error("cannot write " + temp);
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw std::runtime_error("cannot rename " + temp + " to " + path + ": " + ec.message());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nmt-score: loss and last-position logits of a checkpoint on sentence pairs"};
  nmt::ScoreOptions options;
  std::string device, out_path;
  app.add_option("--checkpoint", options.checkpoint,
                 "checkpoint directory (ckpt-<step>), or a run's checkpoint.dir: its best "
                 "checkpoint, else its newest")
      ->required();
  app.add_option("--src", options.source_file, "source sentences, one per line")->required();
  app.add_option("--tgt", options.target_file, "target sentences, one per line")->required();
  app.add_flag("--ids", options.ids, "lines are space-separated token ids (no bos/eos), not text");
  app.add_option("--vocab", options.vocab,
                 "vocabulary for text lines (default: the one recorded in the checkpoint)");
  app.add_option("--device", device, "cpu or cuda (default: cuda when a GPU is visible)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--out", out_path, "the JSON result")->required();
  app.footer("Exit codes: 0 written; 1 runtime error (no output file); 2 usage error.");
  nmt::add_version_flag(app, "nmt-score");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;
  if (!device.empty()) options.device = device == "cuda" ? nmt::Device::cuda : nmt::Device::cpu;

  try {
    options.checkpoint =
        nmt::resolve_checkpoint_argument(options.checkpoint, "nmt-score", std::cerr);
    nlohmann::json result = nmt::score_pairs(options);
    write_atomically(out_path, result.dump() + "\n");
    std::cerr << "nmt-score: " << result["sentences"] << " sentences, " << result["tokens"]
              << " target tokens, loss " << result["loss"] << " on "
              << result["device"].get<std::string>() << " -> " << out_path << "\n";
  } catch (const std::exception& e) {
    std::cerr << "nmt-score: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
