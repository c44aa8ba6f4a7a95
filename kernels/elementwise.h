// Elementwise ops of the Transformer block: ReLU, residual add, dropout, and buffer helpers.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// x, y: same shape. y = max(x, 0). y may alias x.
void relu_forward(const Tensor& x, Tensor& y);
// dx = dy * (y > 0), from the forward output y. dx may alias dy.
void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// Residual add: y = a + b (y may alias a or b). Its backward hands dy to both inputs unchanged.
void residual_add(const Tensor& a, const Tensor& b, Tensor& y);
// y += x.
void add_inplace(Tensor& y, const Tensor& x);
// y *= s.
void scale_inplace(Tensor& y, float s);
// Zero every element.
void fill_zero(Tensor& y);
// dst = src (same shape and dtype; either device).
void copy_tensor(const Tensor& src, Tensor& dst);
// dst = src converted between float dtypes (f32, bf16, f16; round to nearest even), same shape,
// same device. Equal dtypes copy.
void convert_tensor(const Tensor& src, Tensor& dst);

// Inverted dropout: y = x * keep / (1 - p), keep = dropout_keep(key, element index, p), element
// index = flat index into x. p == 0 copies. y may alias x.
void dropout_forward(const Tensor& x, Tensor& y, float p, const RngKey& key);
// dropout_forward, and which elements of its output are positive, as bits: bit e % 32 of i32 word
// e / 32 of positive_bits ([dropout_keep_bits_words(1, x.numel())] i32, apart from x and y; the
// layout of a saved keep mask, kernels/philox.h) is y[e] > 0, the words' bits past the last
// element 0. After a ReLU (y = dropout(relu(z))) that is where the element was kept and passed:
// the mask relu_dropout_backward_bias (kernels/bias_grad_tails.h) reads in place of y, 1 bit an
// element against y's 16 or 32. y may alias x; p == 0 gives x's values (x * 1).
void dropout_forward_positive_bits(const Tensor& x, Tensor& y, float p, const RngKey& key,
                                   Tensor& positive_bits);
// dx = dy * keep / (1 - p) with the same mask regenerated from key. dx may alias dy.
void dropout_backward(const Tensor& dy, Tensor& dx, float p, const RngKey& key);

// Fused tails: one pass where the two ops they replace took two, equal to those ops bit for bit in
// every dtype (a 16-bit result is rounded where the separate ops rounded it).

// a, b, y: same shape. y = a + dropout(b), i.e. dropout_forward(b, b, p, key) then
// residual_add(a, b, y), without writing the dropped-out b. y may alias a or b. Its backward hands
// dy to a unchanged and dropout_backward(dy) to b.
void dropout_residual_add(const Tensor& a, const Tensor& b, Tensor& y, float p, const RngKey& key);
// dy, y, dx: same shape. The backward of y = dropout(relu(z), p) read from its output y:
// dx = dy / (1 - p) where y > 0, else 0. Dropout writes an exact 0 where it drops and keeps the
// sign elsewhere, so y > 0 exactly where the element was kept and relu(z) > 0: the mask needs no
// regenerating. Equals dropout_backward then relu_backward on y. dx may alias dy.
void relu_dropout_backward(const Tensor& dy, const Tensor& y, Tensor& dx, float p);

}  // namespace nmt
