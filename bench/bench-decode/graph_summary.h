// bench-decode's line about the decoder's CUDA graphs (engine/decode/step_graphs.h): whether they
// were on and what they did, so a latency number says which path produced it.
#pragma once

#include <string>

#include "engine/decode/step_graphs.h"

namespace nmt::bench_decode {

// "CUDA graphs on: 120 of 131 steps replayed from 4 graphs (187 nodes each), 11 eager" (the node
// count of the latest capture), "CUDA graphs on, given up: <reason>", or "CUDA graphs off".
std::string graphs_summary(bool on, const StepGraphStats& stats);

}  // namespace nmt::bench_decode
