// Linear layer y = x · Wᵀ + b (PyTorch's nn.Linear layout: W is [out, in]).
#pragma once

#include <vector>

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// x: [rows, in]; w: [out, in]; b: [out] or empty (no bias); y: [rows, out] written (=).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// y = max(x · Wᵀ + b, 0): the same shapes; on the GPU the ReLU is the GEMM's epilogue (no extra
// pass over y). Its backward is relu_backward (kernels/elementwise.h) on y, then linear_backward.
void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// y = dropout(max(x · Wᵀ + b, 0), p, key) and positive_bits: y > 0 as bits (the layout of
// dropout_forward_positive_bits), for the ReLU tail of the backward. The CPU reference is
// linear_relu_forward then dropout_forward_positive_bits; on a Hopper GPU, where switched on, one
// kernel of our own with the whole tail (kernels/cuda/linear_relu_dropout.h).
// x: [rows, in]; w: [out, in]; b: [out] or empty; y: [rows, out];
// positive_bits: [dropout_keep_bits_words(rows, out)] i32.
void linear_relu_dropout_forward(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                                 const RngKey& key, Tensor& y, Tensor& positive_bits);

// GPU products: at each shape's first use, time the algorithms cuBLASLt lists and keep the fastest
// (kernels/cuda/blas.h: set_gemm_autotune). Off by default; the CPU products ignore it.
void set_gemm_autotune(bool on);
// Whether it is on (set_gemm_autotune, or NMT_GEMM_AUTOTUNE=1 in the environment).
bool gemm_autotune_enabled();

// How linear_backward stores dx: written (=), or added (+=) to what dx holds. Adding lets a
// residual's gradient, already in dx, take the product's sum without a separate add pass (on the
// GPU it is the product's own beta = 1: one rounding to dx's dtype instead of two).
enum class DxWrite { assign, add };

// dy: [rows, out]. dx: [rows, in] written or added (dx_write), or empty to skip. dw: [out, in]
// and db: [out] accumulated (+=); either may be empty (dw's product then comes from
// linear_weight_grads). dx must not alias dy, x or w.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, DxWrite dx_write = DxWrite::assign);

// One weight-gradient product of linear_backward: dw [out, in] f32 += dyᵀ x, dy [rows, out] and
// x [rows, in] of one float dtype.
struct WeightGradProduct {
  Tensor dy, x, dw;
};
constexpr int kMaxWeightGradBatch = 32;

// The products' weight gradients, as linear_backward adds each; at most kMaxWeightGradBatch
// products, all of one shape and dtype, on one device, no dw overlapping another product's
// tensors. On the GPU one cuBLASLt launch over all of them (a pointer-array batch: a decoder
// layer's three 512 x 512 products over 8192 rows take 0.037 ms against 0.051 one launch each on
// an H100, bench-kernels --only wgrad-batch), summed in the batch kernel's order; on the CPU one
// after another, linear_backward's bits.
void linear_weight_grads(const std::vector<WeightGradProduct>& products);

}  // namespace nmt
