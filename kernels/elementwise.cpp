// Dispatch of the elementwise ops and buffer helpers (kernels/elementwise.h) to the CPU or CUDA
// backend.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/half_host.h"
#include "kernels/op_checks.h"

namespace nmt {
void relu_forward(const Tensor& x, Tensor& y) {
  constexpr const char* op = "relu_forward";
  detail::require_same_shape(op, "y", y, "x", x);
  check_same_device(op, {&x, &y});
  if (detail::call_device({&x, &y}) == Device::cuda) return cuda::relu_forward(x, y);
  cpu::relu_forward(detail::cpu_f32(op, "x", x), detail::cpu_f32(op, "y", y), x.numel());
}

void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  constexpr const char* op = "relu_backward";
  detail::require_same_shape(op, "y", y, "dy", dy);
  detail::require_same_shape(op, "dx", dx, "dy", dy);
  check_same_device(op, {&dy, &y, &dx});
  if (detail::call_device({&dy, &y, &dx}) == Device::cuda) return cuda::relu_backward(dy, y, dx);
  cpu::relu_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "y", y),
                     detail::cpu_f32(op, "dx", dx), dy.numel());
}

void residual_add(const Tensor& a, const Tensor& b, Tensor& y) {
  constexpr const char* op = "residual_add";
  detail::require_same_shape(op, "b", b, "a", a);
  detail::require_same_shape(op, "y", y, "a", a);
  check_same_device(op, {&a, &b, &y});
  if (detail::call_device({&a, &b, &y}) == Device::cuda) return cuda::residual_add(a, b, y);
  cpu::residual_add(detail::cpu_f32(op, "a", a), detail::cpu_f32(op, "b", b),
                    detail::cpu_f32(op, "y", y), a.numel());
}

void add_inplace(Tensor& y, const Tensor& x) {
  constexpr const char* op = "add_inplace";
  detail::require_same_shape(op, "x", x, "y", y);
  check_same_device(op, {&y, &x});
  if (detail::call_device({&y, &x}) == Device::cuda) return cuda::add_inplace(y, x);
  cpu::add_inplace(detail::cpu_f32(op, "y", y), detail::cpu_f32(op, "x", x), y.numel());
}

void scale_inplace(Tensor& y, float s) {
  constexpr const char* op = "scale_inplace";
  if (detail::call_device({&y}) == Device::cuda) return cuda::scale_inplace(y, s);
  cpu::scale_inplace(detail::cpu_f32(op, "y", y), s, y.numel());
}

void fill_zero(Tensor& y) {
  constexpr const char* op = "fill_zero";
  if (y.empty()) {
    if (y.numel() == 0) return;
    throw std::invalid_argument(std::string(op) + ": y " + y.shape_string() + " has no data");
  }
  if (y.device == Device::cuda) return cuda::fill_zero(y);
  // Any dtype: all-zero bytes are 0 in f32, bf16, f16 and i32 alike.
  std::memset(y.data, 0, y.bytes());
}

void copy_tensor(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "copy_tensor";
  detail::require_same_shape(op, "dst", dst, "src", src);
  if (dst.dtype != src.dtype)
    throw std::invalid_argument(std::string(op) + ": dst " + dst.shape_string() + " and src " +
                                src.shape_string() + " differ in dtype");
  if (src.numel() == 0) return;
  if (src.empty() || dst.empty())
    throw std::invalid_argument(std::string(op) + ": " + (src.empty() ? "src " : "dst ") +
                                (src.empty() ? src : dst).shape_string() + " has no data");
  if (src.device == Device::cuda || dst.device == Device::cuda) return cuda::copy_tensor(src, dst);
  if (src.data != dst.data) std::memmove(dst.data, src.data, src.bytes());
}

namespace {

float host_load(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(t.data)[i]);
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(t.data)[i]);
    default:
      return static_cast<const float*>(t.data)[i];
  }
}

void host_store(const Tensor& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::bf16:
      static_cast<uint16_t*>(t.data)[i] = float_to_bf16(v);
      break;
    case DType::f16:
      static_cast<uint16_t*>(t.data)[i] = float_to_f16(v);
      break;
    default:
      static_cast<float*>(t.data)[i] = v;
      break;
  }
}

void require_float(const char* op, const char* name, const Tensor& t) {
  if (t.dtype == DType::i32)
    throw std::invalid_argument(std::string(op) + ": " + name + " " + t.shape_string() +
                                " must be f32, bf16 or f16");
}

}  // namespace

void convert_tensor(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "convert_tensor";
  detail::require_same_shape(op, "dst", dst, "src", src);
  require_float(op, "src", src);
  require_float(op, "dst", dst);
  check_same_device(op, {&src, &dst});
  if (src.dtype == dst.dtype) return copy_tensor(src, dst);
  if (src.numel() == 0) return;
  if (src.empty() || dst.empty())
    throw std::invalid_argument(std::string(op) + ": " + (src.empty() ? "src " : "dst ") +
                                (src.empty() ? src : dst).shape_string() + " has no data");
  if (src.device == Device::cuda) return cuda::convert_tensor(src, dst);
  for (int64_t i = 0, n = src.numel(); i < n; ++i) host_store(dst, i, host_load(src, i));
}

void dropout_forward(const Tensor& x, Tensor& y, float p, const RngKey& key) {
  constexpr const char* op = "dropout_forward";
  detail::require_same_shape(op, "y", y, "x", x);
  detail::require_dropout_p(op, p);
  check_same_device(op, {&x, &y});
  if (detail::call_device({&x, &y}) == Device::cuda) return cuda::dropout_forward(x, y, p, key);
  cpu::dropout_apply(detail::cpu_f32(op, "x", x), detail::cpu_f32(op, "y", y), x.numel(), p, key);
}

void dropout_forward_positive_bits(const Tensor& x, Tensor& y, float p, const RngKey& key,
                                   Tensor& positive_bits) {
  constexpr const char* op = "dropout_forward_positive_bits";
  detail::require_same_shape(op, "y", y, "x", x);
  detail::require_dropout_p(op, p);
  detail::require_mask_bits(op, "positive_bits", positive_bits, 1, x.numel(),
                            {{"x", &x}, {"y", &y}});
  check_same_device(op, {&x, &y, &positive_bits});
  if (detail::call_device({&x, &y}) == Device::cuda)
    return cuda::dropout_forward_positive_bits(x, y, p, key, positive_bits);
  float* out = detail::cpu_f32(op, "y", y);
  const int64_t n = x.numel();
  cpu::dropout_apply(detail::cpu_f32(op, "x", x), out, n, p, key);
  int32_t* words = detail::cpu_i32(op, "positive_bits", positive_bits);
  std::fill(words, words + positive_bits.numel(), 0);
  for (int64_t e = 0; e < n; ++e)
    if (out[e] > 0.0f) words[e / 32] |= static_cast<int32_t>(1u << (e % 32));
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, const RngKey& key) {
  constexpr const char* op = "dropout_backward";
  detail::require_same_shape(op, "dx", dx, "dy", dy);
  detail::require_dropout_p(op, p);
  check_same_device(op, {&dy, &dx});
  if (detail::call_device({&dy, &dx}) == Device::cuda)
    return cuda::dropout_backward(dy, dx, p, key);
  // The map is linear with a diagonal mask, so its backward applies the same mask to dy.
  cpu::dropout_apply(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "dx", dx), dy.numel(), p,
                     key);
}

void dropout_residual_add(const Tensor& a, const Tensor& b, Tensor& y, float p, const RngKey& key) {
  constexpr const char* op = "dropout_residual_add";
  detail::require_same_shape(op, "b", b, "a", a);
  detail::require_same_shape(op, "y", y, "a", a);
  detail::require_dropout_p(op, p);
  check_same_device(op, {&a, &b, &y});
  if (detail::call_device({&a, &b, &y}) == Device::cuda)
    return cuda::dropout_residual_add(a, b, y, p, key);
  cpu::dropout_residual_add(detail::cpu_f32(op, "a", a), detail::cpu_f32(op, "b", b),
                            detail::cpu_f32(op, "y", y), a.numel(), p, key);
}

void relu_dropout_backward(const Tensor& dy, const Tensor& y, Tensor& dx, float p) {
  constexpr const char* op = "relu_dropout_backward";
  detail::require_same_shape(op, "y", y, "dy", dy);
  detail::require_same_shape(op, "dx", dx, "dy", dy);
  detail::require_dropout_p(op, p);
  check_same_device(op, {&dy, &y, &dx});
  if (detail::call_device({&dy, &y, &dx}) == Device::cuda)
    return cuda::relu_dropout_backward(dy, y, dx, p);
  cpu::relu_dropout_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "y", y),
                             detail::cpu_f32(op, "dx", dx), dy.numel(), p);
}

}  // namespace nmt
