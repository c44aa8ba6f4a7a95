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

}  // namespace nmt::cpu
