// Layer normalisation over the last dimension: y = (x - mean) * rstd * gamma + beta.
#pragma once

#include "kernels/tensor.h"

namespace nmt {

// x, y: [rows, d]; gamma, beta: [d]; mean, rstd: [rows] f32 (saved for backward).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps);

// dy, x, dx: [rows, d]; dx is written (=); d_gamma, d_beta: [d], accumulated (+=).
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta);

}  // namespace nmt
