// nmt-prep: trains a joint SentencePiece BPE vocabulary (or takes an existing vocabulary), encodes
// train and dev into token shards, and writes the dataset report. Usage in docs/data.md.
// Exit codes: 0 written; 1 runtime error (one message on stderr, the output directory as it was);
// 2 usage error.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "apps/cli_exit.h"
#include "data/prep.h"

int main(int argc, char** argv) {
  nmt::PrepOptions options;
  bool quiet = false;
  bool verbose = false;
  CLI::App app{"nmt-prep: parallel text -> vocabulary + token shards + report.json"};
  app.add_option("--train-src", options.train_source, "train source text, one segment per line")
      ->required();
  app.add_option("--train-tgt", options.train_target, "train target text, aligned by line")
      ->required();
  app.add_option("--dev-src", options.dev_source, "dev source text (every line is kept)");
  app.add_option("--dev-tgt", options.dev_target, "dev target text");
  app.add_option("--out", options.out_dir, "output directory (created if missing)")->required();
  app.add_option("--vocab", options.vocab_path,
                 "use this vocabulary instead of training one: a SentencePiece *.model (raw text "
                 "in), or a piece list such as OpenSeq2Seq's m_common.vocab (inputs are then "
                 "pre-tokenized pieces separated by spaces)");
  app.add_option("--vocab-size", options.spm.vocab_size, "SentencePiece vocabulary size")
      ->capture_default_str();
  app.add_option("--character-coverage", options.spm.character_coverage,
                 "share of characters SentencePiece must cover")
      ->capture_default_str();
  app.add_option("--input-sentence-size", options.spm.input_sentence_size,
                 "lines sampled for SentencePiece training (0 = all)")
      ->capture_default_str();
  app.add_option("--max-len", options.max_length,
                 "drop train pairs with a side longer than this many tokens (0 = no limit)")
      ->capture_default_str();
  app.add_option("--max-ratio", options.max_ratio,
                 "drop train pairs whose longer/shorter token ratio exceeds this (0 = no limit)")
      ->capture_default_str();
  app.add_option("--threads", options.threads, "encoding threads (0 = all cores)")
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "print nothing but errors");
  app.add_flag("--verbose", verbose, "show SentencePiece's training log");
  app.footer(
      "Exit codes: 0 written; 1 runtime error (the output directory is left as it was); 2 usage "
      "error.");
  nmt::add_version_flag(app, "nmt-prep");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;

  options.spm.verbose = verbose;
  if (!quiet) options.progress = &std::cerr;
  try {
    const nmt::PrepReport report = nmt::run_prep(options);
    if (!quiet)
      std::cout << nmt::format_report(report) << "wrote " << options.out_dir << "/report.json\n";
  } catch (const std::exception& e) {
    std::cerr << "nmt-prep: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
