// Dispatch of the gradient norm and Adam / LazyAdam updates (kernels/optimizer.h) to the CPU or
// CUDA backend.
#include "kernels/optimizer.h"

#include <cstring>
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

void check_clip_record(const char* op, const Tensor& clip) {
  check_shape(op, "clip", clip, {kGradClipWords});
  detail::require_dtype(op, "clip", clip, DType::i32);
}

// The factor a host update applies, or nothing when the record says skip.
bool host_factor(const GradScale& scale, float& factor) {
  factor = scale.value;
  if (scale.clip == nullptr) return true;
  const GradClip record = read_grad_clip(*scale.clip);  // checked by check_scale_device
  factor = record.scale;
  return record.skip == 0;
}

void check_scale_device(const char* op, const GradScale& scale, const Tensor& param) {
  if (scale.clip == nullptr) return;
  check_clip_record(op, *scale.clip);
  check_same_device(op, {&param, scale.clip});
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  constexpr const char* op = "sum_of_squares";
  if (detail::call_device({&x}) == Device::cuda) return cuda::sum_of_squares(x);
  return cpu::sum_of_squares(detail::cpu_f32(op, "x", x), x.numel());
}

float clip_factor(double norm, float max_norm) {
  return clip_factor_of(norm, max_norm);
}

void grad_clip_into(const Tensor& x, double divisor, float max_norm, Tensor& clip) {
  constexpr const char* op = "grad_clip_into";
  check_clip_record(op, clip);
  check_same_device(op, {&x, &clip});
  if (!(divisor > 0.0))
    throw std::invalid_argument(std::string(op) + ": divisor " + std::to_string(divisor) +
                                " must be > 0");
  if (detail::call_device({&x, &clip}) == Device::cuda)
    return cuda::grad_clip_into(x, divisor, max_norm, clip);
  const GradClip record =
      grad_clip_of(cpu::sum_of_squares(detail::cpu_f32(op, "x", x), x.numel()), divisor, max_norm);
  std::memcpy(clip.data, &record, sizeof(record));
}

GradClip read_grad_clip(const Tensor& clip) {
  check_clip_record("read_grad_clip", clip);
  if (clip.device == Device::cuda) return cuda::read_grad_clip(clip);
  GradClip record;
  std::memcpy(&record, clip.data, sizeof(record));
  return record;
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 GradScale grad_scale, Tensor* compute) {
  constexpr const char* op = "adam_update";
  check_adam_tensors(op, param, grad, m, v);
  check_hyper(op, h);
  check_scale_device(op, grad_scale, param);
  if (detail::call_device({&param, &grad, &m, &v}) == Device::cuda)
    return cuda::adam_update(param, grad, m, v, h, grad_scale, compute);
  float factor = 1.0f;
  if (!host_factor(grad_scale, factor)) return;
  cpu::adam_update(detail::cpu_f32(op, "param", param), detail::cpu_f32(op, "grad", grad),
                   detail::cpu_f32(op, "m", m), detail::cpu_f32(op, "v", v), param.numel(), h,
                   factor);
  if (compute && !compute->empty()) convert_tensor(param, *compute);
}

void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      GradScale grad_scale, Tensor* compute) {
  constexpr const char* op = "lazy_adam_update";
  detail::require_rank(op, "param", param, 2, "[rows, cols]");
  check_adam_tensors(op, param, grad, m, v);
  check_hyper(op, h);
  check_scale_device(op, grad_scale, param);
  if (detail::call_device({&param, &grad, &m, &v}) == Device::cuda)
    return cuda::lazy_adam_update(param, grad, m, v, h, grad_scale, compute);
  float factor = 1.0f;
  if (!host_factor(grad_scale, factor)) return;
  cpu::lazy_adam_update(detail::cpu_f32(op, "param", param), detail::cpu_f32(op, "grad", grad),
                        detail::cpu_f32(op, "m", m), detail::cpu_f32(op, "v", v), param.dim(0),
                        param.dim(1), h, factor);
  if (compute && !compute->empty()) convert_tensor(param, *compute);
}

}  // namespace nmt
