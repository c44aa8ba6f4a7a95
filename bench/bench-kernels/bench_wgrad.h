// bench-kernels' wgrad entry: the weight-gradient products of a Transformer-base step (bf16, k =
// 8192 rows, f32 +=) with cuBLASLt's split-k forced on the heuristic's algorithms, and beside
// their dX product on a second stream (linear_backward's side stream), with and without an
// SM-count target on the dX product.
#pragma once

#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Prints per shape the heuristic's time, the fastest split-k configurations (their difference from
// the heuristic's result and whether a rerun gives the same bits), then the dX + dW pair on one
// stream and on two. Never throws: a failure is printed.
void bench_wgrad(KernelTimer& timer);

}  // namespace nmt::bench
