// CPU reference of the gradient norm and the Adam / LazyAdam updates over flat fp32 buffers.
#pragma once

#include <cstdint>

#include "kernels/optimizer.h"

namespace nmt::cpu {

// x: [n]. Summed in double over fixed chunks, so the result does not depend on the thread count.
double sum_of_squares(const float* x, int64_t n);

// param, grad, m, v: [n] f32 (TensorFlow's Adam, see kernels/optimizer.h).
void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamHyper& h,
                 float grad_scale);

// param, grad, m, v: [rows, cols]; rows whose gradient is all zeros are left untouched.
void lazy_adam_update(float* param, const float* grad, float* m, float* v, int64_t rows,
                      int64_t cols, const AdamHyper& h, float grad_scale);

// The step's lr_t = lr * sqrt(1 - b2^step) / (1 - b1^step) and decay factor 1 - lr * weight_decay,
// as every Adam update here and on the GPU computes them.
struct AdamStep {
  float lr_t;
  float decay_factor;
};
AdamStep adam_step(const AdamHyper& h);

// The updates above with the step's values given (the gated ops: kernels/optimizer.h); h gives
// beta1, beta2 and eps.
void adam_update_with(float* param, const float* grad, float* m, float* v, int64_t n,
                      const AdamHyper& h, AdamStep step, float grad_scale);
void lazy_adam_update_with(float* param, const float* grad, float* m, float* v, int64_t rows,
                           int64_t cols, const AdamHyper& h, AdamStep step, float grad_scale);

// The partial sums of check_gradient_stage: one per chunk of sum_of_squares (summed in double,
// stored as f32), sum_of_squares_parts(n) of them.
int64_t sum_of_squares_parts(int64_t n);
void sum_of_squares_partials(const float* x, int64_t n, float* partials);

}  // namespace nmt::cpu
