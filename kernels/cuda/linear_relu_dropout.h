// The feed-forward block's first product and its tail in one kernel of our own on Hopper
// (linear_relu_dropout.cu), where cuBLASLt's products cannot hold dropout in their epilogue.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// y = dropout(max(x wᵀ + b, 0), p, key) and positive_bits (y > 0 as bits, the layout of
// dropout_forward_positive_bits): the fused kernel where it runs, else linear_relu_forward followed
// by dropout_forward_positive_bits (the same mask and roundings; the products summed in another
// order).
// x: [rows, in] T; w: [out, in] T; b: [out] T or empty; y: [rows, out] T;
// positive_bits: [dropout_keep_bits_words(rows, out)] i32.
void linear_relu_dropout_forward(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                                 const RngKey& key, Tensor& y, Tensor& positive_bits);

// The fused kernel alone: enqueues it and returns true, or returns false having enqueued nothing
// where it cannot run (not an sm_90a build on a compute-9.0 GPU, T not bf16 / f16, no bias,
// in % 8 or out % 32 not 0, x, w or y off 16 bytes). Shapes checked by the caller.
bool fused_linear_relu_dropout(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                               const RngKey& key, Tensor& y, Tensor& positive_bits);

// Whether linear_relu_dropout_forward tries the fused kernel: off by default until it beats the
// two-kernel path (docs/perf.md, session 25); NMT_FUSED_FC1=1 in the environment or
// set_fused_linear_relu_dropout(true) turns it on. Decide before a model's first training step: a
// captured step graph keeps the path it recorded.
void set_fused_linear_relu_dropout(bool on);
bool fused_linear_relu_dropout_enabled();

}  // namespace nmt::cuda
