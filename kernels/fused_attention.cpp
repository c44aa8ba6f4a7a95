// Dispatch of the fused attention (kernels/fused_attention.h) to the CPU reference or the CUDA
// kernels, after checking every operand's shape, columns, dtype and device.
#include "kernels/fused_attention.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/fused_attention.h"
#include "kernels/cuda/flash_attention/flash_attention.h"
#include "kernels/op_checks.h"

namespace nmt {
namespace {

// `t` is [rows, width] with the heads' columns [col, col + heads * head_dim) inside the width.
void check_operand(const char* op, const char* name, const Tensor& t, int64_t col, int64_t rows,
                   const AttentionShape& shape) {
  detail::require_rank(op, name, t, 2, "[rows, width]");
  if (t.dim(0) != rows)
    throw std::invalid_argument(std::string(op) + ": " + name + " has shape " + t.shape_string() +
                                ", expected " + std::to_string(rows) + " rows");
  const int64_t heads_width = shape.heads * shape.head_dim;
  if (col < 0 || col + heads_width > t.dim(1))
    throw std::invalid_argument(std::string(op) + ": " + name + " columns [" + std::to_string(col) +
                                ", " + std::to_string(col + heads_width) +
                                ") do not fit its shape " + t.shape_string());
}

void check_operands(const char* op, const AttentionOperands& x, const AttentionShape& shape,
                    const char* q_name, const char* k_name, const char* v_name, DType dtype) {
  check_operand(op, q_name, x.q, x.q_col, shape.batch * shape.q_len, shape);
  check_operand(op, k_name, x.k, x.k_col, shape.batch * shape.kv_len, shape);
  check_operand(op, v_name, x.v, x.v_col, shape.batch * shape.kv_len, shape);
  detail::require_dtype(op, q_name, x.q, dtype);
  detail::require_dtype(op, k_name, x.k, dtype);
  detail::require_dtype(op, v_name, x.v, dtype);
}

void require_supported(const char* op, Device device, DType dtype, int64_t head_dim) {
  if (!fused_attention_supported(device, dtype, head_dim))
    throw std::invalid_argument(std::string(op) + ": no fused kernel for " + dtype_name(dtype) +
                                " with head_dim " + std::to_string(head_dim) + " on " +
                                device_name(device) +
                                " (see fused_attention_supported; use attention_forward)");
}

cpu::HeadColumns cpu_columns(const char* op, const char* name, const Tensor& t, int64_t col) {
  return {detail::cpu_f32(op, name, t) + col, t.dim(1)};
}
cpu::MutableHeadColumns cpu_mutable_columns(const char* op, const char* name, const Tensor& t,
                                            int64_t col) {
  return {detail::cpu_f32(op, name, t) + col, t.dim(1)};
}

}  // namespace

bool fused_attention_supported(Device device, DType dtype, int64_t head_dim) {
  if (device == Device::cpu) return dtype == DType::f32 && head_dim >= 1;
  return cuda::fused_attention_supported(dtype, head_dim);
}

int64_t fused_attention_keep_bits_words(const AttentionShape& shape) {
  return shape.batch * shape.heads * shape.q_len * 2;
}

namespace {

// keep_bits: empty, or the i32 words of fused_attention_keep_bits_words on `device`.
void check_keep_bits(const char* op, const Tensor& keep_bits, const AttentionShape& shape,
                     Device device) {
  if (keep_bits.empty()) return;
  check_shape(op, "keep_bits", keep_bits, {fused_attention_keep_bits_words(shape)});
  detail::require_dtype(op, "keep_bits", keep_bits, DType::i32);
  if (keep_bits.device != device)
    throw std::invalid_argument(std::string(op) + ": keep_bits must be on the device of q");
}

// Each of bias_grads: empty, or [heads * head_dim] f32 on `device`.
void check_bias_grads(const char* op, const AttentionBiasGrads& bias_grads,
                      const AttentionShape& shape, Device device) {
  auto check = [&](const char* name, const Tensor& bias) {
    if (bias.empty()) return;
    check_shape(op, name, bias, {shape.heads * shape.head_dim});
    detail::require_dtype(op, name, bias, DType::f32);
    if (bias.device != device)
      throw std::invalid_argument(std::string(op) + ": " + name + " must be on the device of q");
  };
  check("bias_grads.q", bias_grads.q);
  check("bias_grads.k", bias_grads.k);
  check("bias_grads.v", bias_grads.v);
}

}  // namespace

bool fused_attention_forward(const AttentionOperands& in, const Tensor& kv_lengths, Tensor& out,
                             Tensor& lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key, const Tensor& keep_bits) {
  constexpr const char* op = "fused_attention_forward";
  detail::check_attention_shape(op, shape, dropout_p);
  const DType dtype = in.q.dtype;
  check_operands(op, in, shape, "q", "k", "v", dtype);
  check_shape(op, "kv_lengths", kv_lengths, {shape.batch});
  detail::require_dtype(op, "kv_lengths", kv_lengths, DType::i32);
  check_shape(op, "out", out, {shape.batch * shape.q_len, shape.heads * shape.head_dim});
  detail::require_dtype(op, "out", out, dtype);
  check_shape(op, "lse", lse, {shape.batch, shape.heads, shape.q_len});
  detail::require_dtype(op, "lse", lse, DType::f32);
  check_same_device(op, {&in.q, &in.k, &in.v, &kv_lengths, &out, &lse});
  check_keep_bits(op, keep_bits, shape, in.q.device);
  if (shape.batch == 0) return false;  // nothing to write
  const Device device = detail::call_device({&in.q, &in.k, &in.v, &kv_lengths, &out, &lse});
  require_supported(op, device, dtype, shape.head_dim);
  if (device == Device::cuda)
    return cuda::fused_attention_forward(in, kv_lengths, out, lse, shape, dropout_p, key,
                                         keep_bits);
  cpu::fused_attention_forward(
      cpu_columns(op, "q", in.q, in.q_col), cpu_columns(op, "k", in.k, in.k_col),
      cpu_columns(op, "v", in.v, in.v_col), detail::cpu_i32(op, "kv_lengths", kv_lengths),
      detail::cpu_f32(op, "out", out), detail::cpu_f32(op, "lse", lse), shape, dropout_p, key);
  return false;  // the CPU reference draws the decisions again in backward
}

bool fused_attention_backward(const Tensor& d_out, const AttentionOperands& in, const Tensor& out,
                              const Tensor& lse, const Tensor& kv_lengths, AttentionOperands& grads,
                              const AttentionShape& shape, float dropout_p, const RngKey& key,
                              const Tensor& keep_bits, const AttentionBiasGrads& bias_grads) {
  constexpr const char* op = "fused_attention_backward";
  detail::check_attention_shape(op, shape, dropout_p);
  const DType dtype = in.q.dtype;
  check_operands(op, in, shape, "q", "k", "v", dtype);
  check_operands(op, grads, shape, "dq", "dk", "dv", dtype);
  if (grads.q_col != in.q_col || grads.k_col != in.k_col || grads.v_col != in.v_col)
    throw std::invalid_argument(
        std::string(op) + ": dq, dk, dv must use the columns of q, k, v (got dq/dk/dv at " +
        std::to_string(grads.q_col) + "/" + std::to_string(grads.k_col) + "/" +
        std::to_string(grads.v_col) + ", q/k/v at " + std::to_string(in.q_col) + "/" +
        std::to_string(in.k_col) + "/" + std::to_string(in.v_col) + ")");
  detail::require_same_shape(op, "dq", grads.q, "q", in.q);
  detail::require_same_shape(op, "dk", grads.k, "k", in.k);
  detail::require_same_shape(op, "dv", grads.v, "v", in.v);
  const int64_t width = shape.heads * shape.head_dim;
  check_shape(op, "d_out", d_out, {shape.batch * shape.q_len, width});
  detail::require_dtype(op, "d_out", d_out, dtype);
  check_shape(op, "out", out, {shape.batch * shape.q_len, width});
  detail::require_dtype(op, "out", out, dtype);
  check_shape(op, "lse", lse, {shape.batch, shape.heads, shape.q_len});
  detail::require_dtype(op, "lse", lse, DType::f32);
  check_shape(op, "kv_lengths", kv_lengths, {shape.batch});
  detail::require_dtype(op, "kv_lengths", kv_lengths, DType::i32);
  check_same_device(
      op, {&d_out, &in.q, &in.k, &in.v, &out, &lse, &kv_lengths, &grads.q, &grads.k, &grads.v});
  check_keep_bits(op, keep_bits, shape, in.q.device);
  check_bias_grads(op, bias_grads, shape, in.q.device);
  if (shape.batch == 0) return false;  // no rows: the column sums are 0
  const Device device = detail::call_device(
      {&d_out, &in.q, &in.k, &in.v, &out, &lse, &kv_lengths, &grads.q, &grads.k, &grads.v});
  require_supported(op, device, dtype, shape.head_dim);
  if (device == Device::cuda)
    return cuda::fused_attention_backward(d_out, in, out, lse, kv_lengths, grads, shape, dropout_p,
                                          key, keep_bits, bias_grads);
  cpu::fused_attention_backward(
      detail::cpu_f32(op, "d_out", d_out), cpu_columns(op, "q", in.q, in.q_col),
      cpu_columns(op, "k", in.k, in.k_col), cpu_columns(op, "v", in.v, in.v_col),
      detail::cpu_f32(op, "lse", lse), detail::cpu_i32(op, "kv_lengths", kv_lengths),
      cpu_mutable_columns(op, "dq", grads.q, grads.q_col),
      cpu_mutable_columns(op, "dk", grads.k, grads.k_col),
      cpu_mutable_columns(op, "dv", grads.v, grads.v_col), shape, dropout_p, key);
  return false;  // the reference leaves the bias gradients to the caller
}

}  // namespace nmt
