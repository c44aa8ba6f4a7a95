// bench-kernels' wgrad-batch entry: the 512 x 512 weight gradients of a Transformer-base step (bf16
// inputs, k = 8192 rows, f32 +=) through linear_weight_grads, one call a product against one call
// over a batch of them held in separate buffers (one pointer-array launch; docs/cuda.md, Linear):
// a decoder layer has three such products.
#pragma once

#include "bench/bench-kernels/bench_timer.h"

namespace nmt::bench {

// Prints, per batch size, the batch's time, the same products one launch each, and how far the
// batch's results are from theirs. Never throws: a failure is printed.
void bench_wgrad_batch(KernelTimer& timer);

}  // namespace nmt::bench
