// CPU reference of layer normalisation over the last dimension, forward and backward.
#pragma once

#include <cstdint>

namespace nmt::cpu {

// x, y: [rows, d] f32 (y may alias x); gamma, beta: [d]; mean, rstd: [rows], written (saved
// for backward).
void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t d, float eps);

// dy, x: [rows, d]; gamma: [d]; mean, rstd: [rows]; dx: [rows, d] written (=), may alias dy
// (not x); d_gamma, d_beta: [d] accumulated (+=).
void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* d_gamma, float* d_beta, int64_t rows,
                        int64_t d);

// As layernorm_backward, with dx = residual + the input gradient, equal bit for bit to
// layernorm_backward then residual_add. residual: [rows, d]; dx: [rows, d] written (=), may alias
// residual (not dy or x).
void layernorm_backward_add(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* residual, float* dx, float* d_gamma,
                            float* d_beta, int64_t rows, int64_t d);

}  // namespace nmt::cpu
