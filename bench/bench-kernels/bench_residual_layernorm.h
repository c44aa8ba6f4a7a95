// bench-kernels' LayerNorm tail rows: the fused ops of kernels/cuda/layernorm.h against the two
// launches each replaces (dropout_residual_add then layernorm_forward; layernorm_backward then
// dropout_backward_bias; layernorm_backward_add then dropout_backward_bias); and the LayerNorm
// backward ops alone.
#pragma once

#include "bench/bench-kernels/bench_column_sums.h"
#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Times, bf16, p 0.1, at [8192, 512] and [8192, 1024] (a post-norm sublayer's rows at d_model 512
// and 1024): the forward pair against dropout_residual_layernorm_forward, and the backward pair
// against layernorm_backward_dropout_bias; in ms and GB/s of the fused op's traffic (forward: read
// residual and branch, write sum and y; backward: read dy and x, write dx and d_branch), so the
// pair's rate is what it reaches on the work the fused op does. Then the pre-norm backward pair
// (layernorm_backward_add with dx over the residual, then dropout_backward_bias) against
// layernorm_backward_add_dropout_bias, dx over the residual, in GB/s of the fused op's traffic
// (read dy, x and the residual, write dx and d_branch). Each fused op also as the model runs it
// with NMT_LAYERNORM_KEEP_BITS on ("keep bits"): the forward storing its dropout mask as bits, the
// backward tails reading it instead of drawing it (the same GB/s basis, the bits' 1/16 of a bf16
// tensor left out), so the two rows A/B the switch.
void bench_residual_layernorm(KernelTimer& timer, ReportRow report);

// Times the LayerNorm backward ops alone, bf16, at [8192, 512] and [8192, 1024]:
// layernorm_backward, layernorm_backward_add (dx in place over the residual) and
// layernorm_backward_dropout_bias (p 0.1), the last also reading the forward's saved mask ("keep
// bits"), in ms and GB/s of each op's [rows, d] traffic (3, 4 and 4 passes).
void bench_layernorm_backward(KernelTimer& timer, ReportRow report);

}  // namespace nmt::bench
