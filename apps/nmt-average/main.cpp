// nmt-average: averages the model weights of checkpoints into a new weights-only checkpoint
// (fairseq's average_checkpoints: element-wise mean, optimizer state not averaged).
//   nmt-average --checkpoints DIR... --out DIR
//   nmt-average --last N --dir CHECKPOINT_DIR --out DIR     (the newest N ckpt-<step> in it)
// Exit codes: 0 written; 1 runtime error (missing, corrupt or mismatched checkpoint, unwritable
// directory); 2 usage error (bad options, too few checkpoints, --out exists).
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <stdexcept>

#include "apps/cli_exit.h"
#include "engine/checkpoint/checkpoint_average.h"
#include "engine/checkpoint/checkpoint_links.h"

int main(int argc, char** argv) {
  CLI::App app{"nmt-average: average the weights of several checkpoints of one model"};
  std::vector<std::string> checkpoints;
  std::string dir, out;
  int64_t last = 0;
  auto* given = app.add_option(
      "--checkpoints", checkpoints,
      "checkpoint directories to average (a run's checkpoint.dir: its best, else newest)");
  auto* newest = app.add_option("--last", last, "average the newest N checkpoints of --dir");
  auto* from = app.add_option("--dir", dir, "checkpoint.dir of a run (with --last)");
  app.add_option("--out", out, "new checkpoint directory to write (must not exist)")->required();
  given->excludes(newest)->excludes(from);
  newest->needs(from);
  from->needs(newest);
  nmt::add_version_flag(app, "nmt-average");
  if (std::optional<int> code = nmt::parse_command_line(app, argc, argv)) return *code;
  try {
    if (checkpoints.empty() && last == 0)
      throw std::invalid_argument("give --checkpoints DIR... or --last N --dir DIR");
    if (last != 0) checkpoints = nmt::latest_checkpoints(dir, last);
    for (std::string& path : checkpoints)  // a run's checkpoint.dir: its best, else its newest
      path = nmt::resolve_checkpoint_argument(path, "nmt-average", std::cerr);
    nmt::AveragedCheckpoint result = nmt::average_checkpoints(checkpoints, out);
    std::cerr << "nmt-average: wrote " << result.path << " (step " << result.step << ", "
              << result.tensors << " tensors, the mean of " << checkpoints.size()
              << " checkpoints)\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "nmt-average: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "nmt-average: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
