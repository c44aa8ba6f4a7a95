// The CUDA-graph summary line of bench-decode.
#include "bench/bench-decode/graph_summary.h"

namespace nmt::bench_decode {

std::string graphs_summary(bool on, const StepGraphStats& stats) {
  if (!on) return "CUDA graphs off";
  if (!stats.failure.empty()) return "CUDA graphs on, given up: " + stats.failure;
  const int64_t steps = stats.replays + stats.eager_steps;
  return "CUDA graphs on: " + std::to_string(stats.replays) + " of " + std::to_string(steps) +
         " steps replayed from " + std::to_string(stats.captures) + " graphs (" +
         std::to_string(stats.graph_nodes) + " nodes each), " + std::to_string(stats.eager_steps) +
         " eager; reorders: " + std::to_string(stats.reorders.replays) + " replayed from " +
         std::to_string(stats.reorders.captures) + " graphs, " +
         std::to_string(stats.reorders.eager) + " eager";
}

}  // namespace nmt::bench_decode
