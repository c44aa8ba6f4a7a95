// Dispatch of the backward tails with a bias gradient (kernels/bias_grad_tails.h). The CPU runs the
// two steps they fuse, the element op and then linear_backward's column sums, so its results are
// the unfused pair's bit for bit.
#include "kernels/bias_grad_tails.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"
#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/op_checks.h"

namespace nmt {
namespace {

// The checks both ops share: dy [rows, cols], dx like dy, db [cols], p in [0, 1), db apart from
// the matrices (it is added to while they are read and written).
void check_tail(const char* op, const Tensor& dy, const Tensor& dx, const Tensor& db, float p) {
  detail::require_rank(op, "dy", dy, 2, "[rows, cols]");
  detail::require_same_shape(op, "dx", dx, "dy", dy);
  check_shape(op, "db", db, {dy.dim(1)});
  detail::require_dropout_p(op, p);
  detail::require_disjoint(op, "db", db, "dy", dy);
  detail::require_disjoint(op, "db", db, "dx", dx);
}

}  // namespace

void dropout_backward_bias(const Tensor& dy, Tensor& dx, float p, const RngKey& key, Tensor& db,
                           const Tensor& keep_bits) {
  constexpr const char* op = "dropout_backward_bias";
  check_tail(op, dy, dx, db, p);
  detail::require_keep_bits(op, keep_bits, dy.dim(0), dy.dim(1), {{"dx", &dx}, {"db", &db}});
  check_same_device(op, {&dy, &dx, &db, &keep_bits});
  if (detail::call_device({&dy, &dx, &db}) == Device::cuda)
    return cuda::dropout_backward_bias(dy, dx, p, key, db, keep_bits);
  float* dx_data = detail::cpu_f32(op, "dx", dx);
  cpu::dropout_apply(detail::cpu_f32(op, "dy", dy), dx_data, dy.numel(), p, key);
  cpu::accumulate_column_sums(dx_data, dy.dim(0), dy.dim(1), detail::cpu_f32(op, "db", db));
}

void relu_dropout_backward_bias(const Tensor& dy, const Tensor& y, Tensor& dx, float p, Tensor& db,
                                const Tensor& positive_bits) {
  constexpr const char* op = "relu_dropout_backward_bias";
  check_tail(op, dy, dx, db, p);
  detail::require_same_shape(op, "y", y, "dy", dy);
  if (!positive_bits.empty())
    detail::require_mask_bits(op, "positive_bits", positive_bits, dy.dim(0), dy.dim(1),
                              {{"dx", &dx}, {"db", &db}});
  check_same_device(op, {&dy, &y, &dx, &db, &positive_bits});
  if (detail::call_device({&dy, &y, &dx, &db}) == Device::cuda)
    return cuda::relu_dropout_backward_bias(dy, y, dx, p, db, positive_bits);
  float* dx_data = detail::cpu_f32(op, "dx", dx);
  cpu::relu_dropout_backward(detail::cpu_f32(op, "dy", dy), detail::cpu_f32(op, "y", y), dx_data,
                             dy.numel(), p);
  cpu::accumulate_column_sums(dx_data, dy.dim(0), dy.dim(1), detail::cpu_f32(op, "db", db));
}

}  // namespace nmt
