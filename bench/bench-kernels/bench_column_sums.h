// bench-kernels' column-sum rows: accumulate_column_sums (the bias gradients) at Transformer-base
// widths, against the two-kernel version it replaced, kept here as the reference.
#pragma once

#include <string>

#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Prints one table row (bench_kernels.cu's report).
using ReportRow = void (*)(const std::string& op, const std::string& shape, double ms, double rate,
                           const char* unit);

// Times the column sums of bf16 [8192, 512], [8192, 2048] and [8192, 1536], the engine's one
// launch and the old two launches, in GB/s of the matrix read; prints their largest difference.
void bench_column_sums(KernelTimer& timer, ReportRow report);

}  // namespace nmt::bench
