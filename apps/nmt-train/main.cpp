// nmt-train: trains a Transformer from a JSON run config.
//   nmt-train --config FILE [--set section.key=value ...] [--resume | --init-from CKPT]
//             [--print-config]
// Exit codes: 0 trained to train.max_steps (or stopped early by eval.early_stop_patience), or
// stopped by SIGTERM after saving a checkpoint (a preempted job that can be resumed is not a
// failure); 130 stopped by SIGINT (Ctrl-C) after saving a checkpoint, as shells report an
// interrupted command; 2 usage or config error; 1 any other error (one message on stderr).
#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>

#include "apps/cli_exit.h"
#include "engine/config/config.h"
#include "engine/report/run_card_command.h"
#include "engine/train/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"nmt-train: train a Transformer translation model"};
  std::string config_path;
  std::vector<std::string> sets;
  bool print_config = false;
  bool resume = false;
  std::string init_from;
  app.add_option("--config", config_path, "JSON run config (see docs/config.md)")->required();
  app.add_option("--set", sets, "override one key: section.key=value (repeatable)");
  app.add_flag("--resume", resume,
               "continue from the newest checkpoint in checkpoint.dir (bit-identical to an "
               "uninterrupted run)");
  app.add_option("--init-from", init_from,
                 "fine-tune: start a new run from this checkpoint's weights (fresh optimizer and "
                 "step; the model shape must match)")
      ->excludes("--resume");
  app.add_flag("--print-config", print_config, "print the fully resolved config and exit");
  app.footer(
      "Exit codes: 0 trained to train.max_steps, stopped early, or stopped by SIGTERM after saving "
      "a checkpoint (resume with --resume); 130 stopped by SIGINT after saving; 1 runtime error "
      "(data, checkpoint, divergence, no GPU); 2 usage or config error.");
  nmt::add_version_flag(app, "nmt-train");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;

  constexpr int kExitInterrupted = 128 + SIGINT;
  try {
    nmt::RunConfig cfg = nmt::load_run_config(config_path, sets);
    if (print_config) {
      std::cout << nmt::format_run_config(cfg) << "\n";
      return 0;
    }
    nmt::TrainOptions options;
    options.resume = resume;
    options.init_from = init_from;
    options.command_line.assign(argv, argv + argc);
    options.stop_signal = &nmt::install_stop_signal_handlers();
    nmt::TrainSummary summary = nmt::run_training(cfg, std::cout, options);
    if (!summary.card_dir.empty())
      nmt::write_run_card_quietly(nmt::run_card_script(NMT_RUN_CARD_SCRIPT), summary.card_dir,
                                  std::cout);
    if (summary.stop_signal == SIGINT) return kExitInterrupted;
  } catch (const nmt::ConfigError& e) {
    std::cerr << "nmt-train: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "nmt-train: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
