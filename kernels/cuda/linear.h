// The CUDA linear layer on cuBLASLt (kernels/linear.h dispatches here with the same signatures),
// enqueued on the current stream (kernels/cuda/stream.h) without synchronising.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include "kernels/tensor.h"

namespace nmt::cuda {

// x: [rows, in] T; w: [out, in] T; b: [out] T or empty; y: [rows, out] T.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// y = max(x wᵀ + b, 0) in one cuBLASLt product (RELU_BIAS epilogue); shapes as linear_forward.
void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// dy: [rows, out] T; dx: [rows, in] T (=, or += when add_dx: the product's beta = 1) or empty;
// dw: [out, in] f32 (+=); db: [out] f32 (+=) or empty.
// When both dx and dw are asked for and dw has at most 2^20 elements, the dw product (and db's
// sums) run on the current stream's side stream (kernels/cuda/scratch.h) beside the dx product,
// and the current stream waits for them before the call returns: the same bits, ordered as if on
// one stream (set_weight_grad_stream).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, bool add_dx = false);

// Whether linear_backward runs the small weight gradients beside the input gradient (on by
// default: a 512 x 512 weight gradient over 8192 rows runs 16 tiles, split-k 2, on 132
// multiprocessors). NMT_WEIGHT_GRAD_STREAM=0 in the environment, or set_weight_grad_stream(false),
// runs both on the current stream, one after the other; NMT_WEIGHT_GRAD_STREAM_MAX=N moves the
// 2^20-element limit (docs/perf.md, session 10).
void set_weight_grad_stream(bool on);
bool weight_grad_stream();

}  // namespace nmt::cuda
