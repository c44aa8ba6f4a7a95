// bench-kernels' fc1 rows: the feed-forward block's first product with its tail, as the
// two-kernel path (cuBLASLt with the bias and ReLU epilogue, then dropout with its bits) against
// the fused kernel of our own (kernels/cuda/linear_relu_dropout.h), and cuBLASLt's product with
// bias and ReLU alone (what the tail may add to).
#pragma once

#include "bench/bench-kernels/bench_column_sums.h"
#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// bf16, p 0.1, at base's [8192 x 512] -> 2048 and 16384 rows, and big's [8192 x 1024] -> 4096;
// TFLOP/s of the product.
void bench_ffn_fc1(KernelTimer& timer, ReportRow report);

}  // namespace nmt::bench
