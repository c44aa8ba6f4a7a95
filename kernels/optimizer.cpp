// Dispatch of the gradient norm and Adam / LazyAdam updates (kernels/optimizer.h) to the CPU or
// CUDA backend.
#include "kernels/optimizer.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/optimizer.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/elementwise.h"
#include "kernels/op_checks.h"

namespace nmt {
namespace {

void check_hyper(const char* op, const AdamHyper& h) {
  auto fail = [op](const std::string& what) {
    throw std::invalid_argument(std::string(op) + ": " + what);
  };
  if (h.step < 1) fail("step " + std::to_string(h.step) + " must be >= 1 (it is 1-based)");
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f))
    fail("beta1 " + std::to_string(h.beta1) + " is outside [0, 1)");
  if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f))
    fail("beta2 " + std::to_string(h.beta2) + " is outside [0, 1)");
  if (!(h.eps > 0.0f)) fail("eps " + std::to_string(h.eps) + " must be > 0");
}

void check_adam_tensors(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m,
                        const Tensor& v) {
  detail::require_same_shape(op, "grad", grad, "param", param);
  detail::require_same_shape(op, "m", m, "param", param);
  detail::require_same_shape(op, "v", v, "param", param);
  check_same_device(op, {&param, &grad, &m, &v});
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  constexpr const char* op = "sum_of_squares";
  if (detail::call_device({&x}) == Device::cuda) return cuda::sum_of_squares(x);
  return cpu::sum_of_squares(detail::cpu_f32(op, "x", x), x.numel());
}

float clip_factor(double norm, float max_norm) {
  // !(norm > max_norm) also catches a NaN norm: the caller skips such a step anyway.
  if (max_norm <= 0.0f || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / norm);
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 float grad_scale, Tensor* compute) {
  constexpr const char* op = "adam_update";
  check_adam_tensors(op, param, grad, m, v);
  check_hyper(op, h);
  if (detail::call_device({&param, &grad, &m, &v}) == Device::cuda)
    return cuda::adam_update(param, grad, m, v, h, grad_scale, compute);
  cpu::adam_update(detail::cpu_f32(op, "param", param), detail::cpu_f32(op, "grad", grad),
                   detail::cpu_f32(op, "m", m), detail::cpu_f32(op, "v", v), param.numel(), h,
                   grad_scale);
  if (compute && !compute->empty()) convert_tensor(param, *compute);
}

void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      float grad_scale, Tensor* compute) {
  constexpr const char* op = "lazy_adam_update";
  detail::require_rank(op, "param", param, 2, "[rows, cols]");
  check_adam_tensors(op, param, grad, m, v);
  check_hyper(op, h);
  if (detail::call_device({&param, &grad, &m, &v}) == Device::cuda)
    return cuda::lazy_adam_update(param, grad, m, v, h, grad_scale, compute);
  cpu::lazy_adam_update(detail::cpu_f32(op, "param", param), detail::cpu_f32(op, "grad", grad),
                        detail::cpu_f32(op, "m", m), detail::cpu_f32(op, "v", v), param.dim(0),
                        param.dim(1), h, grad_scale);
  if (compute && !compute->empty()) convert_tensor(param, *compute);
}

}  // namespace nmt
