// Backward tails that also add a bias gradient: the gradient a dropout (or ReLU + dropout) backward
// writes is the output gradient of the linear layer below it, whose bias gradient is its column
// sums. These ops write that gradient and add its column sums into the bias gradient in one pass,
// and the linear_backward that follows skips its db (passes an empty tensor). dx and db equal the
// unfused pair (the op of elementwise.h, then linear_backward's db from the stored dx) bit for bit
// on the CPU; on the GPU dx is the unfused op's to the bit and db is summed in the fixed order of
// the column sums (kernels/cuda/reduce.h), deterministic run to run.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// dy, dx: [rows, cols]; dx = what dropout_backward(dy, dx, p, key) writes (p == 0: a copy of dy),
// dx may alias dy. db: [cols] f32, += the column sums of dx as stored (rounded to dx's dtype).
// keep_bits: empty (the mask of p and key is drawn), or that mask saved as bits by the forward
// that applied it (kernels/philox.h; dropout_residual_layernorm_forward, kernels/layernorm.h),
// [dropout_keep_bits_words(rows, cols)] i32 on dy's device, apart from dx and db (checked): the
// GPU reads it instead of drawing, the CPU draws; the same bits either way.
void dropout_backward_bias(const Tensor& dy, Tensor& dx, float p, const RngKey& key, Tensor& db,
                           const Tensor& keep_bits = Tensor());

// dy, y, dx: [rows, cols]; dx = what relu_dropout_backward(dy, y, dx, p) writes (y: the forward's
// output dropout(relu(z))), dx may alias dy. db: [cols] f32, += the column sums of dx as stored.
// positive_bits: empty, or y > 0 as dropout_forward_positive_bits stored it
// (kernels/elementwise.h), [dropout_keep_bits_words(rows, cols)] i32 on dy's device, apart from dx
// and db (checked): the GPU reads those bits instead of y (a 16th of the bytes at bf16), the CPU
// reads y; the same results.
void relu_dropout_backward_bias(const Tensor& dy, const Tensor& y, Tensor& dx, float p, Tensor& db,
                                const Tensor& positive_bits = Tensor());

}  // namespace nmt
