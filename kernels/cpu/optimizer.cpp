// CPU reference of the gradient norm and the Adam / LazyAdam updates.
#include "kernels/cpu/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace nmt::cpu {
namespace {

constexpr int64_t kChunk = 1 << 15;  // elements per partial sum of sum_of_squares

struct AdamStep {
  float lr_t;          // lr * sqrt(1 - b2^step) / (1 - b1^step)
  float decay_factor;  // 1 - lr * weight_decay
};

AdamStep adam_step(const AdamHyper& h) {
  const double t = static_cast<double>(h.step);
  const double correction = std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)) /
                            (1.0 - std::pow(static_cast<double>(h.beta1), t));
  return {static_cast<float>(h.lr * correction), 1.0f - h.lr * h.weight_decay};
}

// One element of TensorFlow's Adam, with decoupled weight decay applied to the old parameter
// first (as PyTorch's AdamW does).
inline void adam_element(float& param, float grad, float& m, float& v, const AdamHyper& h,
                         const AdamStep& step) {
  m = h.beta1 * m + (1.0f - h.beta1) * grad;
  v = h.beta2 * v + (1.0f - h.beta2) * grad * grad;
  param = param * step.decay_factor - step.lr_t * m / (std::sqrt(v) + h.eps);
}

}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double sum = 0;
    for (int64_t i = c * kChunk; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
    partial[c] = sum;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamHyper& h,
                 float grad_scale) {
  const AdamStep step = adam_step(h);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) adam_element(param[i], grad[i] * grad_scale, m[i], v[i], h, step);
}

void lazy_adam_update(float* param, const float* grad, float* m, float* v, int64_t rows,
                      int64_t cols, const AdamHyper& h, float grad_scale) {
  const AdamStep step = adam_step(h);
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const float* grad_row = grad + r * cols;
    // A row no token of the batch touched keeps its parameters and moments (TF's LazyAdam).
    if (std::all_of(grad_row, grad_row + cols, [](float g) { return g == 0.0f; })) continue;
    for (int64_t i = r * cols; i < (r + 1) * cols; ++i)
      adam_element(param[i], grad[i] * grad_scale, m[i], v[i], h, step);
  }
}

}  // namespace nmt::cpu
