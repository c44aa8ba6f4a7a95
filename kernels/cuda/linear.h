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
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, bool add_dx = false);

}  // namespace nmt::cuda
