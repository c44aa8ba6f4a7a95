// Dispatch of layer normalisation (kernels/layernorm.h) to the CPU or CUDA backend.
#include "kernels/layernorm.h"

#include "kernels/cpu/layernorm.h"
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

}  // namespace nmt
