// bench-kernels' bias-gradient tail rows: the backward tails that add their column sums into the
// bias gradient in the same pass (kernels/cuda/bias_grad_tails.h) against the two launches they
// replace (the element op, then accumulate_column_sums re-reading its output).
#pragma once

#include "bench/bench-kernels/bench_column_sums.h"
#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Times, bf16: dropout_backward (p 0.1, and p 0: a copy) + column sums against
// dropout_backward_bias at [8192, 512] (a sublayer's output gradient), and relu_dropout_backward +
// column sums against relu_dropout_backward_bias at [8192, 2048] (fc1's output gradient); in ms
// and GB/s of the fused op's traffic (read dy and y where read, write dx).
void bench_bias_grad_tails(KernelTimer& timer, ReportRow report);

}  // namespace nmt::bench
