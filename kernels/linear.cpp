// Dispatch of the linear layer (kernels/linear.h) to the CPU or CUDA backend.
#include "kernels/linear.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_relu_dropout.h"
#include "kernels/elementwise.h"
#include "kernels/op_checks.h"

namespace nmt {

void set_gemm_autotune(bool on) {
  cuda::set_gemm_autotune(on);
}

bool gemm_autotune_enabled() {
  return cuda::gemm_autotune();
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  constexpr const char* op = "linear_forward";
  detail::require_rank(op, "x", x, 2, "[rows, in]");
  detail::require_rank(op, "w", w, 2, "[out, in]");
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_shape(op, "w", w, {out, in});
  if (!b.empty()) check_shape(op, "b", b, {out});
  check_shape(op, "y", y, {rows, out});
  check_same_device(op, {&x, &w, &b, &y});
  if (detail::call_device({&x, &w, &b, &y}) == Device::cuda)
    return cuda::linear_forward(x, w, b, y);
  cpu::linear_forward(detail::cpu_f32(op, "x", x), detail::cpu_f32(op, "w", w),
                      b.empty() ? nullptr : detail::cpu_f32(op, "b", b),
                      detail::cpu_f32(op, "y", y), rows, in, out);
}

void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  constexpr const char* op = "linear_relu_forward";
  if (detail::call_device({&x, &w, &b, &y}) == Device::cuda) {
    check_same_device(op, {&x, &w, &b, &y});
    return cuda::linear_relu_forward(x, w, b, y);
  }
  linear_forward(x, w, b, y);  // the CPU reference: the product, then the ReLU in place
  relu_forward(y, y);
}

void linear_relu_dropout_forward(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                                 const RngKey& key, Tensor& y, Tensor& positive_bits) {
  constexpr const char* op = "linear_relu_dropout_forward";
  if (detail::call_device({&x, &w, &b, &y}) == Device::cuda) {
    check_same_device(op, {&x, &w, &b, &y, &positive_bits});
    return cuda::linear_relu_dropout_forward(x, w, b, p, key, y, positive_bits);
  }
  linear_relu_forward(x, w, b, y);  // the CPU reference: the two ops
  dropout_forward_positive_bits(y, y, p, key, positive_bits);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db, DxWrite dx_write) {
  constexpr const char* op = "linear_backward";
  detail::require_rank(op, "x", x, 2, "[rows, in]");
  detail::require_rank(op, "w", w, 2, "[out, in]");
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  check_shape(op, "w", w, {out, in});
  check_shape(op, "dy", dy, {rows, out});
  if (!dx.empty()) {
    check_shape(op, "dx", dx, {rows, in});
    // dx is written (or added to) while the products read dy, x and w.
    detail::require_disjoint(op, "dx", dx, "dy", dy);
    detail::require_disjoint(op, "dx", dx, "x", x);
    detail::require_disjoint(op, "dx", dx, "w", w);
  }
  if (!dw.empty()) check_shape(op, "dw", dw, {out, in});
  if (!db.empty()) check_shape(op, "db", db, {out});
  check_same_device(op, {&dy, &x, &w, &dx, &dw, &db});
  if (detail::call_device({&dy, &x, &w, &dx, &dw, &db}) == Device::cuda)
    return cuda::linear_backward(dy, x, w, dx, dw, db, dx_write == DxWrite::add);
  cpu::linear_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "x", x),
                       detail::cpu_f32(op, "w", w),
                       dx.empty() ? nullptr : detail::cpu_f32(op, "dx", dx),
                       dw.empty() ? nullptr : detail::cpu_f32(op, "dw", dw),
                       db.empty() ? nullptr : detail::cpu_f32(op, "db", db), rows, in, out,
                       dx_write == DxWrite::add);
}

void linear_weight_grads(const std::vector<WeightGradProduct>& products) {
  constexpr const char* op = "linear_weight_grads";
  if (products.empty()) return;
  if (products.size() > static_cast<size_t>(kMaxWeightGradBatch))
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(products.size()) +
                                " products, at most " + std::to_string(kMaxWeightGradBatch));
  const WeightGradProduct& first = products[0];
  detail::require_rank(op, "x", first.x, 2, "[rows, in]");
  detail::require_rank(op, "dy", first.dy, 2, "[rows, out]");
  const int64_t rows = first.x.dim(0), in = first.x.dim(1), out = first.dy.dim(1);
  for (const WeightGradProduct& p : products) {
    check_shape(op, "x", p.x, {rows, in});
    check_shape(op, "dy", p.dy, {rows, out});
    check_shape(op, "dw", p.dw, {out, in});
    detail::require_same_dtype(op, "dy", p.dy, "x", first.x);
    detail::require_same_dtype(op, "x", p.x, "x", first.x);
    detail::require_dtype(op, "dw", p.dw, DType::f32);
    check_same_device(op, {&first.x, &p.x, &p.dy, &p.dw});
  }
  for (const WeightGradProduct& p : products)
    for (const WeightGradProduct& q : products) {
      detail::require_disjoint(op, "dw", p.dw, "x", q.x);
      detail::require_disjoint(op, "dw", p.dw, "dy", q.dy);
      if (&p != &q) detail::require_disjoint(op, "dw", p.dw, "another dw", q.dw);
    }
  if (first.x.device == Device::cuda) return cuda::linear_weight_grads(products);
  for (const WeightGradProduct& p : products)
    cpu::linear_backward(detail::cpu_f32(op, "dy", p.dy), detail::cpu_f32(op, "x", p.x), nullptr,
                         nullptr, detail::cpu_f32(op, "dw", p.dw), nullptr, rows, in, out);
}

}  // namespace nmt
