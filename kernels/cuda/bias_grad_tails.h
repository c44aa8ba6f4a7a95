// The CUDA backward tails that also add a bias gradient (kernels/bias_grad_tails.h dispatches here
// with the same signatures), enqueued on the current stream (kernels/cuda/stream.h) without
// synchronising. One launch each (one per 4096 column tiles): the gradient is written and its
// column sums taken in the same pass, in the order of accumulate_column_sums (reduce.h), so db gets
// the bits that accumulate_column_sums of the written dx would give.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// dy, dx: [rows, cols] T (f32, bf16 or f16); dx may alias dy. db: [cols] f32 (+=). keep_bits:
// empty (the mask is drawn), or the mask of p and key saved as bits, [dropout_keep_bits_words(rows,
// cols)] i32 apart from dx and db, read on every path (the same bits).
void dropout_backward_bias(const Tensor& dy, Tensor& dx, float p, const RngKey& key, Tensor& db,
                           const Tensor& keep_bits = Tensor());
// dy, y, dx: [rows, cols] T; dx may alias dy. db: [cols] f32 (+=). positive_bits: empty (y > 0 is
// read from y), or that mask as dropout_forward_positive_bits stored it,
// [dropout_keep_bits_words(rows, cols)] i32 apart from dx and db: read instead of y (the same
// bits; y's shape and dtype are checked, its data not read).
void relu_dropout_backward_bias(const Tensor& dy, const Tensor& y, Tensor& dx, float p, Tensor& db,
                                const Tensor& positive_bits = Tensor());

}  // namespace nmt::cuda
