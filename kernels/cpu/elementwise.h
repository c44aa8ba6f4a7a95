// CPU reference of the elementwise ops: ReLU, residual add, in-place add/scale, dropout.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cpu {

// Every array is [n] f32 (any shape, flattened); outputs may alias inputs element for element.
void relu_forward(const float* x, float* y, int64_t n);
void relu_backward(const float* dy, const float* y, float* dx, int64_t n);  // dx = dy * (y > 0)
void residual_add(const float* a, const float* b, float* y, int64_t n);     // y = a + b
void add_inplace(float* y, const float* x, int64_t n);                      // y += x
void scale_inplace(float* y, float s, int64_t n);                           // y *= s

// y = x * keep / (1 - p), keep from dropout_keep(key, flat index, p); requires 0 <= p < 1.
// The backward is the same map applied to dy (the mask is regenerated from key).
void dropout_apply(const float* x, float* y, int64_t n, float p, const RngKey& key);

// y = a + dropout(b): the same mask and product as dropout_apply, then the add.
void dropout_residual_add(const float* a, const float* b, float* y, int64_t n, float p,
                          const RngKey& key);
// dx = y > 0 ? dy / (1 - p) : 0 (the scale computed as dropout_apply computes it).
void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p);

}  // namespace nmt::cpu
