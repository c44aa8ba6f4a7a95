// CPU reference of the gradient norm and the Adam / LazyAdam updates.
#include "kernels/cpu/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace nmt::cpu {
namespace {

constexpr int64_t kChunk = 1 << 15;  // elements per partial sum of sum_of_squares

// One element of TensorFlow's Adam, with decoupled weight decay applied to the old parameter
// first (as PyTorch's AdamW does).
inline void adam_element(float& param, float grad, float& m, float& v, const AdamHyper& h,
                         const AdamStep& step) {
  m = h.beta1 * m + (1.0f - h.beta1) * grad;
  v = h.beta2 * v + (1.0f - h.beta2) * grad * grad;
  param = param * step.decay_factor - step.lr_t * m / (std::sqrt(v) + h.eps);
}

// Chunk c's sum of squares, in double.
double chunk_sum_of_squares(const float* x, int64_t n, int64_t c) {
  const int64_t end = std::min(n, (c + 1) * kChunk);
  double sum = 0;
  for (int64_t i = c * kChunk; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace

AdamStep adam_step(const AdamHyper& h) {
  const double t = static_cast<double>(h.step);
  const double correction = std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)) /
                            (1.0 - std::pow(static_cast<double>(h.beta1), t));
  return {static_cast<float>(h.lr * correction), 1.0f - h.lr * h.weight_decay};
}

double sum_of_squares(const float* x, int64_t n) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) partial[c] = chunk_sum_of_squares(x, n, c);
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

int64_t sum_of_squares_parts(int64_t n) {
  return (n + kChunk - 1) / kChunk;
}

void sum_of_squares_partials(const float* x, int64_t n, float* partials) {
  const int64_t chunks = sum_of_squares_parts(n);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c)
    partials[c] = static_cast<float>(chunk_sum_of_squares(x, n, c));
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamHyper& h,
                 float grad_scale) {
  adam_update_with(param, grad, m, v, n, h, adam_step(h), grad_scale);
}

void adam_update_with(float* param, const float* grad, float* m, float* v, int64_t n,
                      const AdamHyper& h, AdamStep step, float grad_scale) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) adam_element(param[i], grad[i] * grad_scale, m[i], v[i], h, step);
}

void lazy_adam_update(float* param, const float* grad, float* m, float* v, int64_t rows,
                      int64_t cols, const AdamHyper& h, float grad_scale) {
  lazy_adam_update_with(param, grad, m, v, rows, cols, h, adam_step(h), grad_scale);
}

void lazy_adam_update_with(float* param, const float* grad, float* m, float* v, int64_t rows,
                           int64_t cols, const AdamHyper& h, AdamStep step, float grad_scale) {
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
