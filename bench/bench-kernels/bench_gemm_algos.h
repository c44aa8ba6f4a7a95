// bench-kernels' gemm-algos entry: each distinct cuBLASLt product of a Transformer-base training
// step (bf16, 8192 rows a side, set up as kernels/cuda/linear.cpp sets it up) timed with every
// algorithm cublasLtMatmulAlgoGetHeuristic offers, against the heuristic's first pick, and the sum
// over one step.
#pragma once

#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Prints, per product, the heuristic's first pick and the fastest algorithm (its index in the
// heuristic's list, ms, TFLOP/s), the candidates larger workspaces add, then a table and the step
// totals. `verbose`: one line per candidate as well. Never throws: a product that fails is
// reported and skipped.
void bench_gemm_algos(KernelTimer& timer, bool verbose);

}  // namespace nmt::bench
