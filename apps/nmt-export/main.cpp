// nmt-export: writes a checkpoint in a format another toolkit reads.
//   nmt-export --checkpoint DIR --format marian --out DIR [--vocab PATH]
// `marian` is Marian's model.npz + vocab.yml (with the SentencePiece model and export.json), what
// CTranslate2's converter reads; scripts/ct2_nmt_converter.py converts it (docs/export.md).
// Exit codes: 0 written; 1 runtime error (missing or corrupt checkpoint, unwritable directory);
// 2 usage error (bad or missing option, --out exists). One message on stderr either way.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <stdexcept>

#include "apps/cli_exit.h"
#include "engine/checkpoint/checkpoint_links.h"
#include "engine/checkpoint/marian_export.h"

int main(int argc, char** argv) {
  CLI::App app{"nmt-export: write a checkpoint in a format another toolkit reads"};
  nmt::MarianExportOptions options;
  std::string format;
  app.add_option("--checkpoint", options.checkpoint,
                 "checkpoint directory (ckpt-<step>), or a run's checkpoint.dir: its best "
                 "checkpoint, else its newest")
      ->required();
  app.add_option("--format", format, "output format: marian (Marian .npz, for CTranslate2)")
      ->required();
  app.add_option("--out", options.out, "export directory to create (must not exist)")->required();
  app.add_option("--vocab", options.vocab,
                 "vocabulary file (default: the one recorded in the checkpoint)");
  nmt::add_version_flag(app, "nmt-export");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;
  try {
    options.checkpoint =
        nmt::resolve_checkpoint_argument(options.checkpoint, "nmt-export", std::cerr);
    if (format != "marian")
      throw std::invalid_argument("--format " + format + ": unknown (supported: marian)");
    nmt::MarianExportResult result = nmt::export_marian(options);
    std::cerr << "nmt-export: wrote " << options.out << " (" << result.tensors << " arrays, step "
              << result.step << "):";
    for (const std::string& file : result.files) std::cerr << " " << file;
    std::cerr << "\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "nmt-export: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "nmt-export: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
