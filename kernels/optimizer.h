// Global gradient norm, and the Adam / LazyAdam updates over flat fp32 buffers.
#pragma once

#include <cstdint>

#include "kernels/grad_clip.h"
#include "kernels/tensor.h"

namespace nmt {

// Sum of squares of every element (accumulated in double on the CPU, fp32 pairs on the GPU).
double sum_of_squares(const Tensor& x);

// The factor that clips a gradient of norm `norm` to `max_norm` (1 when max_norm <= 0 or not
// needed; kernels/grad_clip.h).
float clip_factor(double norm, float max_norm);

// x: the raw gradients, any shape. Writes grad_clip_of(sum of squares of x, divisor, max_norm)
// (kernels/grad_clip.h; the sum as sum_of_squares computes it) into `clip` ([kGradClipWords] i32 on
// x's device). On the GPU it is enqueued on the current stream and the record stays there, for the
// updates below to read: no host round trip.
void grad_clip_into(const Tensor& x, double divisor, float max_norm, Tensor& clip);
// The record in `clip` ([kGradClipWords] i32; synchronises the current stream on the GPU).
GradClip read_grad_clip(const Tensor& clip);

// The factor on each raw gradient of an update: a host value, or a grad_clip_into record read
// where the update runs (its scale; a record that says skip leaves every buffer untouched).
struct GradScale {
  GradScale(float factor) : value(factor) {}  // NOLINT(google-explicit-constructor): a plain factor
  explicit GradScale(const Tensor& record) : clip(&record) {}
  float value = 1.0f;
  const Tensor* clip = nullptr;  // [kGradClipWords] i32 on the update's device, or none
};

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
                 GradScale grad_scale, Tensor* compute = nullptr);

// LazyAdam (TensorFlow's LazyAdamOptimizer, OpenSeq2Seq's choice for embeddings): param, grad, m, v
// are [rows, cols]; a row whose gradient is all zeros is left untouched (moments not decayed).
// compute: as for adam_update (untouched rows keep their working copy).
void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      GradScale grad_scale, Tensor* compute = nullptr);

}  // namespace nmt
