// CPU reference of layer normalisation: y = (x - mean) * rstd * gamma + beta, and its backward.
#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace nmt::cpu {

void layernorm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t d, float eps) {
#pragma omp parallel for schedule(static) if (rows * d > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x_row = x + r * d;
    // Two passes in double: the reference should not lose the variance of a row with a large mean.
    double sum = 0;
    for (int64_t i = 0; i < d; ++i) sum += x_row[i];
    const double row_mean = d > 0 ? sum / static_cast<double>(d) : 0.0;
    double squares = 0;
    for (int64_t i = 0; i < d; ++i) {
      const double centred = x_row[i] - row_mean;
      squares += centred * centred;
    }
    const double variance = d > 0 ? squares / static_cast<double>(d) : 0.0;
    const float row_rstd = static_cast<float>(1.0 / std::sqrt(variance + eps));
    const float mean_f = static_cast<float>(row_mean);
    mean[r] = mean_f;
    rstd[r] = row_rstd;
    float* y_row = y + r * d;
    for (int64_t i = 0; i < d; ++i) y_row[i] = (x_row[i] - mean_f) * row_rstd * gamma[i] + beta[i];
  }
}

namespace {

// layernorm_backward, and with a residual (not null) layernorm_backward_add.
void backward(const float* dy, const float* x, const float* gamma, const float* mean,
              const float* rstd, const float* residual, float* dx, float* d_gamma, float* d_beta,
              int64_t rows, int64_t d) {
  // Parameter gradients first (so dx may alias dy), summed over rows: serial in row order so the
  // result does not depend on the thread count; the inner loop runs over contiguous columns and
  // vectorises.
  std::vector<float> sum_dgamma(static_cast<size_t>(d), 0.0f);  // [d]
  std::vector<float> sum_dbeta(static_cast<size_t>(d), 0.0f);   // [d]
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy_row = dy + r * d;
    const float* x_row = x + r * d;
    for (int64_t i = 0; i < d; ++i) {
      sum_dgamma[i] += dy_row[i] * (x_row[i] - mean[r]) * rstd[r];
      sum_dbeta[i] += dy_row[i];
    }
  }
  for (int64_t i = 0; i < d; ++i) {
    d_gamma[i] += sum_dgamma[i];
    d_beta[i] += sum_dbeta[i];
  }

  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, xhat the normalised x.
#pragma omp parallel for schedule(static) if (rows * d > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* dy_row = dy + r * d;
    const float* x_row = x + r * d;
    const float row_mean = mean[r], row_rstd = rstd[r];
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t i = 0; i < d; ++i) {
      const double g = dy_row[i] * gamma[i];
      const double xhat = (x_row[i] - row_mean) * row_rstd;
      sum_g += g;
      sum_g_xhat += g * xhat;
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(d));
    const float mean_g_xhat = static_cast<float>(sum_g_xhat / static_cast<double>(d));
    const auto input_gradient = [&](int64_t i) {
      const float xhat = (x_row[i] - row_mean) * row_rstd;
      return row_rstd * (dy_row[i] * gamma[i] - mean_g - xhat * mean_g_xhat);
    };
    float* dx_row = dx + r * d;
    if (!residual) {
      for (int64_t i = 0; i < d; ++i) dx_row[i] = input_gradient(i);
      continue;
    }
    // residual_add's f32 add, element by element (dx_row may be residual_row). The build targets
    // the x86-64 baseline, which has no FMA (kernels/cpu/vectorize.h), so the compiler cannot fuse
    // this add into the product above: it rounds separately, as the two separate ops do.
    const float* residual_row = residual + r * d;
    for (int64_t i = 0; i < d; ++i) dx_row[i] = residual_row[i] + input_gradient(i);
  }
}

}  // namespace

void layernorm_backward(const float* dy, const float* x, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* d_gamma, float* d_beta, int64_t rows,
                        int64_t d) {
  backward(dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta, rows, d);
}

void layernorm_backward_add(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* residual, float* dx, float* d_gamma,
                            float* d_beta, int64_t rows, int64_t d) {
  backward(dy, x, gamma, mean, rstd, residual, dx, d_gamma, d_beta, rows, d);
}

}  // namespace nmt::cpu
