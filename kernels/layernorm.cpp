// Dispatch of layer normalisation and its fused sublayer tails (kernels/layernorm.h) to the CPU or
// CUDA backend. On the CPU the fused tails run the reference routines of the ops they replace, one
// after the other, so their results are those ops' bit for bit.
#include "kernels/layernorm.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/op_checks.h"

namespace nmt {
namespace {

// The shapes, devices and overlaps of both backward ops: x [rows, d] sets rows and d; residual is
// layernorm_backward_add's (null for layernorm_backward).
void check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                    const Tensor& mean, const Tensor& rstd, const Tensor* residual,
                    const Tensor& dx, const Tensor& d_gamma, const Tensor& d_beta) {
  detail::require_rank(op, "x", x, 2, "[rows, d]");
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "dy", dy, {rows, d});
  check_shape(op, "gamma", gamma, {d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  check_shape(op, "dx", dx, {rows, d});
  check_shape(op, "d_gamma", d_gamma, {d});
  check_shape(op, "d_beta", d_beta, {d});
  check_same_device(op, {&dy, &x, &gamma, &mean, &rstd, residual, &dx, &d_gamma, &d_beta});
  if (!residual) return;
  check_shape(op, "residual", *residual, {rows, d});
  detail::require_disjoint(op, "dx", dx, "dy", dy);
  detail::require_disjoint_or_same(op, "dx", dx, "residual", *residual);
}

// The dropout-bias tail's checks, after check_backward: d_branch [rows, d] and d_branch_bias [d]
// beside the others, p a dropout rate, and the overlaps the tail forbids. Without a residual dx
// may be dy itself (in place); with one, check_backward already kept dx apart from dy, and
// d_branch must stay apart from the residual too.
void check_branch_tail(const char* op, const Tensor& dy, const Tensor& x, const Tensor* residual,
                       const Tensor& dx, const Tensor& d_branch, float p,
                       const Tensor& d_branch_bias, const Tensor& keep_bits) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "d_branch", d_branch, {rows, d});
  check_shape(op, "d_branch_bias", d_branch_bias, {d});
  detail::require_dropout_p(op, p);
  detail::require_keep_bits(op, keep_bits, rows, d, {{"dx", &dx}, {"d_branch", &d_branch}});
  check_same_device(op, {&dy, &x, &d_branch, &d_branch_bias, &keep_bits});
  detail::require_branch_tail_apart(op, dy, x, residual, dx, d_branch, d_branch_bias);
}

// The CPU reference of both dropout-bias tails: layernorm_backward (layernorm_backward_add with a
// residual), then dropout_backward_bias's two steps (bias_grad_tails.cpp), the mask drawn (a
// saved one is the same mask). Every dtype and data check before the first write.
void branch_tail_on_cpu(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                        const Tensor& mean, const Tensor& rstd, const Tensor* residual, Tensor& dx,
                        Tensor& d_gamma, Tensor& d_beta, Tensor& d_branch, float p,
                        const RngKey& key, Tensor& d_branch_bias) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  const float* dy_data = detail::cpu_f32(op, "dy", dy);
  const float* x_data = detail::cpu_f32(op, "x", x);
  const float* gamma_data = detail::cpu_f32(op, "gamma", gamma);
  const float* mean_data = detail::cpu_f32(op, "mean", mean);
  const float* rstd_data = detail::cpu_f32(op, "rstd", rstd);
  const float* residual_data = residual ? detail::cpu_f32(op, "residual", *residual) : nullptr;
  float* dx_data = detail::cpu_f32(op, "dx", dx);
  float* d_gamma_data = detail::cpu_f32(op, "d_gamma", d_gamma);
  float* d_beta_data = detail::cpu_f32(op, "d_beta", d_beta);
  float* d_branch_data = detail::cpu_f32(op, "d_branch", d_branch);
  float* d_branch_bias_data = detail::cpu_f32(op, "d_branch_bias", d_branch_bias);
  if (residual_data)
    cpu::layernorm_backward_add(dy_data, x_data, gamma_data, mean_data, rstd_data, residual_data,
                                dx_data, d_gamma_data, d_beta_data, rows, d);
  else
    cpu::layernorm_backward(dy_data, x_data, gamma_data, mean_data, rstd_data, dx_data,
                            d_gamma_data, d_beta_data, rows, d);
  cpu::dropout_apply(dx_data, d_branch_data, rows * d, p, key);
  cpu::accumulate_column_sums(d_branch_data, rows, d, d_branch_bias_data);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps) {
  constexpr const char* op = "layernorm_forward";
  detail::require_rank(op, "x", x, 2, "[rows, d]");
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "gamma", gamma, {d});
  check_shape(op, "beta", beta, {d});
  check_shape(op, "y", y, {rows, d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  check_same_device(op, {&x, &gamma, &beta, &y, &mean, &rstd});
  if (detail::call_device({&x, &gamma, &beta, &y, &mean, &rstd}) == Device::cuda)
    return cuda::layernorm_forward(x, gamma, beta, y, mean, rstd, eps);
  cpu::layernorm_forward(detail::cpu_f32(op, "x", x), detail::cpu_f32(op, "gamma", gamma),
                         detail::cpu_f32(op, "beta", beta), detail::cpu_f32(op, "y", y),
                         detail::cpu_f32(op, "mean", mean), detail::cpu_f32(op, "rstd", rstd), rows,
                         d, eps);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta) {
  constexpr const char* op = "layernorm_backward";
  check_backward(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta);
  if (detail::call_device({&dy, &x, &gamma, &mean, &rstd, &dx, &d_gamma, &d_beta}) == Device::cuda)
    return cuda::layernorm_backward(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta);
  cpu::layernorm_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "x", x),
                          detail::cpu_f32(op, "gamma", gamma), detail::cpu_f32(op, "mean", mean),
                          detail::cpu_f32(op, "rstd", rstd), detail::cpu_f32(op, "dx", dx),
                          detail::cpu_f32(op, "d_gamma", d_gamma),
                          detail::cpu_f32(op, "d_beta", d_beta), x.dim(0), x.dim(1));
}

void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                            Tensor& dx, Tensor& d_gamma, Tensor& d_beta) {
  constexpr const char* op = "layernorm_backward_add";
  check_backward(op, dy, x, gamma, mean, rstd, &residual, dx, d_gamma, d_beta);
  if (detail::call_device({&dy, &x, &gamma, &mean, &rstd, &residual, &dx, &d_gamma, &d_beta}) ==
      Device::cuda)
    return cuda::layernorm_backward_add(dy, x, gamma, mean, rstd, residual, dx, d_gamma, d_beta);
  cpu::layernorm_backward_add(
      detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "x", x),
      detail::cpu_f32(op, "gamma", gamma), detail::cpu_f32(op, "mean", mean),
      detail::cpu_f32(op, "rstd", rstd), detail::cpu_f32(op, "residual", residual),
      detail::cpu_f32(op, "dx", dx), detail::cpu_f32(op, "d_gamma", d_gamma),
      detail::cpu_f32(op, "d_beta", d_beta), x.dim(0), x.dim(1));
}

bool dropout_residual_layernorm_forward(const Tensor& residual, const Tensor& branch, Tensor& sum,
                                        float p, const RngKey& key, const Tensor& gamma,
                                        const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                                        float eps, const Tensor& keep_bits) {
  constexpr const char* op = "dropout_residual_layernorm_forward";
  detail::require_rank(op, "residual", residual, 2, "[rows, d]");
  const int64_t rows = residual.dim(0), d = residual.dim(1);
  check_shape(op, "branch", branch, {rows, d});
  check_shape(op, "sum", sum, {rows, d});
  check_shape(op, "gamma", gamma, {d});
  check_shape(op, "beta", beta, {d});
  check_shape(op, "y", y, {rows, d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  detail::require_dropout_p(op, p);
  detail::require_keep_bits(
      op, keep_bits, rows, d,
      {{"residual", &residual}, {"branch", &branch}, {"sum", &sum}, {"y", &y}});
  check_same_device(op, {&residual, &branch, &sum, &gamma, &beta, &y, &mean, &rstd, &keep_bits});
  detail::require_disjoint_or_same(op, "sum", sum, "residual", residual);
  detail::require_disjoint_or_same(op, "sum", sum, "branch", branch);
  detail::require_disjoint(op, "y", y, "residual", residual);
  detail::require_disjoint(op, "y", y, "branch", branch);
  detail::require_disjoint(op, "y", y, "sum", sum);
  if (detail::call_device({&residual, &branch, &sum, &gamma, &beta, &y, &mean, &rstd}) ==
      Device::cuda)
    return cuda::dropout_residual_layernorm_forward(residual, branch, sum, p, key, gamma, beta, y,
                                                    mean, rstd, eps, keep_bits);
  // Every dtype and data check before the first write.
  const float* residual_data = detail::cpu_f32(op, "residual", residual);
  const float* branch_data = detail::cpu_f32(op, "branch", branch);
  float* sum_data = detail::cpu_f32(op, "sum", sum);
  const float* gamma_data = detail::cpu_f32(op, "gamma", gamma);
  const float* beta_data = detail::cpu_f32(op, "beta", beta);
  float* y_data = detail::cpu_f32(op, "y", y);
  float* mean_data = detail::cpu_f32(op, "mean", mean);
  float* rstd_data = detail::cpu_f32(op, "rstd", rstd);
  cpu::dropout_residual_add(residual_data, branch_data, sum_data, rows * d, p, key);
  cpu::layernorm_forward(sum_data, gamma_data, beta_data, y_data, mean_data, rstd_data, rows, d,
                         eps);
  return false;  // the CPU backward draws the mask
}

void layernorm_backward_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& d_gamma, Tensor& d_beta, Tensor& d_branch, float p,
                                     const RngKey& key, Tensor& d_branch_bias,
                                     const Tensor& keep_bits) {
  constexpr const char* op = "layernorm_backward_dropout_bias";
  check_backward(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta);
  check_branch_tail(op, dy, x, nullptr, dx, d_branch, p, d_branch_bias, keep_bits);
  if (detail::call_device({&dy, &x, &gamma, &mean, &rstd, &dx, &d_gamma, &d_beta, &d_branch,
                           &d_branch_bias}) == Device::cuda)
    return cuda::layernorm_backward_dropout_bias(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta,
                                                 d_branch, p, key, d_branch_bias, keep_bits);
  branch_tail_on_cpu(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta, d_branch, p, key,
                     d_branch_bias);
}

void layernorm_backward_add_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& rstd,
                                         const Tensor& residual, Tensor& dx, Tensor& d_gamma,
                                         Tensor& d_beta, Tensor& d_branch, float p,
                                         const RngKey& key, Tensor& d_branch_bias,
                                         const Tensor& keep_bits) {
  constexpr const char* op = "layernorm_backward_add_dropout_bias";
  // Shapes, devices, dx apart from dy, dx the residual or apart from it (layernorm_backward_add's).
  check_backward(op, dy, x, gamma, mean, rstd, &residual, dx, d_gamma, d_beta);
  check_branch_tail(op, dy, x, &residual, dx, d_branch, p, d_branch_bias, keep_bits);
  if (detail::call_device({&dy, &x, &gamma, &mean, &rstd, &residual, &dx, &d_gamma, &d_beta,
                           &d_branch, &d_branch_bias}) == Device::cuda)
    return cuda::layernorm_backward_add_dropout_bias(dy, x, gamma, mean, rstd, residual, dx,
                                                     d_gamma, d_beta, d_branch, p, key,
                                                     d_branch_bias, keep_bits);
  branch_tail_on_cpu(op, dy, x, gamma, mean, rstd, &residual, dx, d_gamma, d_beta, d_branch, p, key,
                     d_branch_bias);
}

}  // namespace nmt
