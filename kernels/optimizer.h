// Global gradient norm, and the Adam / LazyAdam updates over flat fp32 buffers.
#pragma once

#include <array>
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

// ---- Gated updates: the optimizer step in stages, during the backward
// ---------------------------- engine/train/optimizer.h's staged step updates each stage of
// parameters as soon as the backward has finished its gradients, from work that a CUDA graph
// captures and replays. What changes from step to step is therefore read on the device from `gate`,
// f32 [kAdamGateWords] on the parameters' device: word 0 lr_t = lr * sqrt(1 - b2^step) / (1 -
// b1^step), word 1 the decay factor 1 - lr * weight_decay, word 2 the gradient scale
// (adam_gate_words writes the three as adam_update computes them, so a gated update gives
// adam_update's bits), and word 3 the skip flag: 0, or 1 once check_gradient_stage found a
// non-finite gradient, after which every gated update of the step changes nothing. h gives beta1,
// beta2 and eps (h.lr, h.step and h.weight_decay are only adam_gate_words').
constexpr int64_t kAdamGateWords = 4;
constexpr int64_t kAdamGateSkip = 3;

// The gate's words for a step (the skip flag clear).
std::array<float, kAdamGateWords> adam_gate_words(const AdamHyper& h, float grad_scale);

// How many partial sums check_gradient_stage writes for `numel` f32 gradient elements on `device`.
int64_t gradient_check_parts(int64_t numel, Device device);

// grad: f32, any shape. partials: f32 [gradient_check_parts(grad.numel())], each the sum of squares
// of a fixed run of the elements (their total in part order is the gradient's sum of squares);
// sets the gate's skip flag when a partial is not finite (leaves it as it is otherwise). Nothing
// is read back: the caller copies the partials after the step.
void check_gradient_stage(const Tensor& grad, Tensor& partials, Tensor& gate);

// adam_update / lazy_adam_update with lr_t, the decay factor and the gradient scale from `gate`,
// doing nothing when its skip flag is set.
void adam_update_gated(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                       const Tensor& gate, Tensor* compute = nullptr);
void lazy_adam_update_gated(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                            const AdamHyper& h, const Tensor& gate, Tensor* compute = nullptr);

}  // namespace nmt
