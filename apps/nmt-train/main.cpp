// nmt-train: trains a Transformer from a JSON run config.
//   nmt-train --config FILE [--set section.key=value ...] [--resume] [--print-config]
// Exit codes: 0 trained to train.max_steps (or stopped early by eval.early_stop_patience), or
// stopped by SIGTERM after saving a checkpoint (a preempted job that can be resumed is not a
// failure); 130 stopped by SIGINT (Ctrl-C) after saving a checkpoint, as shells report an
// interrupted command; 2 config error; 1 any other error (one message on stderr).
#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <iostream>

#include "engine/config/config.h"
#include "engine/train/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"nmt-train: train a Transformer translation model"};
  std::string config_path;
  std::vector<std::string> sets;
  bool print_config = false;
  bool resume = false;
  app.add_option("--config", config_path, "JSON run config (see docs/config.md)")->required();
  app.add_option("--set", sets, "override one key: section.key=value (repeatable)");
  app.add_flag("--resume", resume,
               "continue from the newest checkpoint in checkpoint.dir (bit-identical to an "
               "uninterrupted run)");
  app.add_flag("--print-config", print_config, "print the fully resolved config and exit");
  CLI11_PARSE(app, argc, argv);

  constexpr int kExitInterrupted = 128 + SIGINT;
  try {
    nmt::RunConfig cfg = nmt::load_run_config(config_path, sets);
    if (print_config) {
      std::cout << nmt::format_run_config(cfg) << "\n";
      return 0;
    }
    nmt::TrainOptions options;
    options.resume = resume;
    options.stop_signal = &nmt::install_stop_signal_handlers();
    nmt::TrainSummary summary = nmt::run_training(cfg, std::cout, options);
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
