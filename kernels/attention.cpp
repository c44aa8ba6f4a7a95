// Dispatch of multi-head attention (kernels/attention.h) to the CPU or CUDA backend.
#include "kernels/attention.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/op_checks.h"

namespace nmt {

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_lengths,
                       Tensor& out, Tensor& probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key) {
  constexpr const char* op = "attention_forward";
  detail::check_attention_shape(op, shape, dropout_p);
  const int64_t width = shape.heads * shape.head_dim;
  check_shape(op, "q", q, {shape.batch * shape.q_len, width});
  check_shape(op, "k", k, {shape.batch * shape.kv_len, width});
  check_shape(op, "v", v, {shape.batch * shape.kv_len, width});
  check_shape(op, "kv_lengths", kv_lengths, {shape.batch});
  check_shape(op, "out", out, {shape.batch * shape.q_len, width});
  check_shape(op, "probs", probs, {shape.batch, shape.heads, shape.q_len, shape.kv_len});
  detail::require_dtype(op, "kv_lengths", kv_lengths, DType::i32);
  check_same_device(op, {&q, &k, &v, &kv_lengths, &out, &probs});
  if (detail::call_device({&q, &k, &v, &kv_lengths, &out, &probs}) == Device::cuda)
    return cuda::attention_forward(q, k, v, kv_lengths, out, probs, shape, dropout_p, key);
  cpu::attention_forward(detail::cpu_f32(op, "q", q), detail::cpu_f32(op, "k", k),
                         detail::cpu_f32(op, "v", v), detail::cpu_i32(op, "kv_lengths", kv_lengths),
                         detail::cpu_f32(op, "out", out), detail::cpu_f32(op, "probs", probs),
                         shape, dropout_p, key);
}

void attention_backward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& probs, const Tensor& kv_lengths, Tensor& dq, Tensor& dk,
                        Tensor& dv, const AttentionShape& shape, float dropout_p,
                        const RngKey& key) {
  constexpr const char* op = "attention_backward";
  detail::check_attention_shape(op, shape, dropout_p);
  const int64_t width = shape.heads * shape.head_dim;
  const int64_t q_rows = shape.batch * shape.q_len, kv_rows = shape.batch * shape.kv_len;
  check_shape(op, "d_out", d_out, {q_rows, width});
  check_shape(op, "q", q, {q_rows, width});
  check_shape(op, "k", k, {kv_rows, width});
  check_shape(op, "v", v, {kv_rows, width});
  check_shape(op, "probs", probs, {shape.batch, shape.heads, shape.q_len, shape.kv_len});
  check_shape(op, "kv_lengths", kv_lengths, {shape.batch});
  check_shape(op, "dq", dq, {q_rows, width});
  check_shape(op, "dk", dk, {kv_rows, width});
  check_shape(op, "dv", dv, {kv_rows, width});
  detail::require_dtype(op, "kv_lengths", kv_lengths, DType::i32);
  check_same_device(op, {&d_out, &q, &k, &v, &probs, &kv_lengths, &dq, &dk, &dv});
  if (detail::call_device({&d_out, &q, &k, &v, &probs, &kv_lengths, &dq, &dk, &dv}) == Device::cuda)
    return cuda::attention_backward(d_out, q, k, v, probs, kv_lengths, dq, dk, dv, shape, dropout_p,
                                    key);
  cpu::attention_backward(
      detail::cpu_f32(op, "d_out", d_out), detail::cpu_f32(op, "q", q), detail::cpu_f32(op, "k", k),
      detail::cpu_f32(op, "v", v), detail::cpu_f32(op, "probs", probs),
      detail::cpu_i32(op, "kv_lengths", kv_lengths), detail::cpu_f32(op, "dq", dq),
      detail::cpu_f32(op, "dk", dk), detail::cpu_f32(op, "dv", dv), shape, dropout_p, key);
}

}  // namespace nmt
