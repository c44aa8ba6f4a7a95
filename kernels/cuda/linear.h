// The CUDA linear layer on cuBLASLt (kernels/linear.h dispatches here with the same signatures),
// enqueued on the current stream (kernels/cuda/stream.h) without synchronising.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/linear.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// The layer's cuBLASLt products at `rows` rows, for x [rows, in], W [out, in] and dy [rows, out]
// of dtype t: what linear_forward and linear_backward run, and what benchmarks and tests time and
// check as theirs. Row-major [rows, n] buffers are column-major [n, rows] matrices to cuBLAS:
//   y  = x Wᵀ (ReLU)     ->  yᵀ (out x rows) = op_T(W as in x out) · xᵀ (in x rows)
//   dx = dy W (+= add)   ->  dxᵀ (in x rows) = W (in x out) · dyᵀ (out x rows)
//   dW += dyᵀ x, f32     ->  dWᵀ (in x out) += xᵀ (in x rows) · op_T(dyᵀ) (rows x out)
LtMatmul linear_forward_product(int64_t rows, int64_t in, int64_t out, DType t, bool relu = false);
LtMatmul linear_dx_product(int64_t rows, int64_t in, int64_t out, DType t, bool add_dx = false);
LtMatmul linear_dw_product(int64_t rows, int64_t in, int64_t out, DType t);

// x: [rows, in] T; w: [out, in] T; b: [out] T or empty; y: [rows, out] T.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// y = max(x wᵀ + b, 0) in one cuBLASLt product (RELU_BIAS epilogue); shapes as linear_forward.
void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// dy: [rows, out] T; dx: [rows, in] T (=, or += when add_dx: the product's beta = 1) or empty;
// dw: [out, in] f32 (+=); db: [out] f32 (+=) or empty.
// With the side stream on (off by default, set_weight_grad_stream) and both dx and dw asked for,
// a dw of at most 2^20 elements is computed (with db's sums) on the current stream's side stream
// (kernels/cuda/scratch.h) beside the dx product, and the current stream waits for them before the
// call returns: the same bits, ordered as if on one stream.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, bool add_dx = false);
// kernels/linear.h's linear_weight_grads (checked there): one pointer-array launch over the
// products (linear_weight_grads.cpp), or one dW product each where a pointer is off 16 bytes.
void linear_weight_grads(const std::vector<WeightGradProduct>& products);

// Whether linear_backward runs the small weight gradients beside the input gradient. Off by
// default: on one H100 it saved nothing measurable on a base step (the dX products' persistent
// kernels hold every multiprocessor) and cost big 0.2 ms (docs/perf.md, session 10).
// NMT_WEIGHT_GRAD_STREAM=1 in the environment, or set_weight_grad_stream(true), turns it on;
// NMT_WEIGHT_GRAD_STREAM_MAX=N moves the 2^20-element limit. With GEMM autotuning also on, a dW
// plan is timed while its dX product runs beside it, which may skew that plan's choice.
void set_weight_grad_stream(bool on);
bool weight_grad_stream();

}  // namespace nmt::cuda
