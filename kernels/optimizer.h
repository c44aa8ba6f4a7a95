// Global gradient norm, and the Adam / LazyAdam updates over flat fp32 buffers.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt {

// Sum of squares of every element (accumulated in double on the CPU, fp32 pairs on the GPU).
double sum_of_squares(const Tensor& x);

// The factor that clips a gradient of norm `norm` to `max_norm` (1 when max_norm <= 0 or not
// needed).
float clip_factor(double norm, float max_norm);

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled (AdamW-style): param -= lr * weight_decay * param
  int64_t step = 1;        // 1-based, for bias correction
};

// TensorFlow's Adam (what OpenSeq2Seq used): g = grad * grad_scale; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g²; lr_t = lr * sqrt(1 - b2^step) / (1 - b1^step); param -= lr_t * m / (sqrt(v)
// + eps). param, grad, m, v: same shape, f32. compute: nullptr, or the mixed-precision working copy
// of param (same shape, bf16/f16/f32, same device), written with the updated values (round to
// nearest even) in the same pass on the GPU.
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 float grad_scale, Tensor* compute = nullptr);

// LazyAdam (TensorFlow's LazyAdamOptimizer, OpenSeq2Seq's choice for embeddings): param, grad, m, v
// are [rows, cols]; a row whose gradient is all zeros is left untouched (moments not decayed).
// compute: as for adam_update (untouched rows keep their working copy).
void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      float grad_scale, Tensor* compute = nullptr);

}  // namespace nmt
