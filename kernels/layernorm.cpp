// Dispatch of layer normalisation (kernels/layernorm.h) to the CPU or CUDA backend.
#include "kernels/layernorm.h"

#include "kernels/cpu/layernorm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/op_checks.h"

namespace nmt {

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
  detail::require_rank(op, "x", x, 2, "[rows, d]");
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "dy", dy, {rows, d});
  check_shape(op, "gamma", gamma, {d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  check_shape(op, "dx", dx, {rows, d});
  check_shape(op, "d_gamma", d_gamma, {d});
  check_shape(op, "d_beta", d_beta, {d});
  check_same_device(op, {&dy, &x, &gamma, &mean, &rstd, &dx, &d_gamma, &d_beta});
  if (detail::call_device({&dy, &x, &gamma, &mean, &rstd, &dx, &d_gamma, &d_beta}) == Device::cuda)
    return cuda::layernorm_backward(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta);
  cpu::layernorm_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "x", x),
                          detail::cpu_f32(op, "gamma", gamma), detail::cpu_f32(op, "mean", mean),
                          detail::cpu_f32(op, "rstd", rstd), detail::cpu_f32(op, "dx", dx),
                          detail::cpu_f32(op, "d_gamma", d_gamma),
                          detail::cpu_f32(op, "d_beta", d_beta), rows, d);
}

}  // namespace nmt
