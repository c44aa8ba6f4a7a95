// nmt-train: trains a Transformer from a JSON run config.
//   nmt-train --config FILE [--set section.key=value ...] [--print-config]
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "engine/config.h"
#include "engine/trainer.h"

int main(int argc, char** argv) {
  CLI::App app{"nmt-train: train a Transformer translation model"};
  std::string config_path;
  std::vector<std::string> sets;
  bool print_config = false;
  app.add_option("--config", config_path, "JSON run config (see docs/config.md)")->required();
  app.add_option("--set", sets, "override one key: section.key=value (repeatable)");
  app.add_flag("--print-config", print_config, "print the fully resolved config and exit");
  CLI11_PARSE(app, argc, argv);

  try {
    nmt::RunConfig cfg = nmt::load_run_config(config_path, sets);
    if (print_config) {
      std::cout << nmt::format_run_config(cfg) << "\n";
      return 0;
    }
    nmt::run_training(cfg, std::cout);
  } catch (const nmt::ConfigError& e) {
    std::cerr << "nmt-train: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "nmt-train: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
