// Dispatch of the token embedding (kernels/embedding.h) to the CPU or CUDA backend, and the
// sinusoid formula every backend shares.
#include "kernels/embedding.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/embedding.h"
#include "kernels/elementwise.h"
#include "kernels/op_checks.h"
#include "kernels/sinusoid.h"

namespace nmt {

float sinusoid_position(int64_t position, int64_t dim, int64_t d_model) {
  return sinusoid_value(position, dim, d_model);
}

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id, const EmbeddingDropout& dropout) {
  constexpr const char* op = "embedding_forward";
  const int64_t rows = ids.dim(0);
  detail::require_rank(op, "ids", ids, 1, "[rows]");
  detail::require_rank(op, "table", table, 2, "[vocab, d_model]");
  const int64_t vocab = table.dim(0), d_model = table.dim(1);
  check_shape(op, "out", out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  if (seq_len <= 0 || rows % seq_len != 0)
    throw std::invalid_argument(std::string(op) + ": rows " + std::to_string(rows) +
                                " is not a multiple of seq_len " + std::to_string(seq_len));
  check_same_device(op, {&ids, &table, &out});
  detail::require_dropout_p(op, dropout.p);
  if (detail::call_device({&ids, &table, &out}) == Device::cuda)
    return cuda::embedding_forward(ids, table, out, seq_len, scale, pad_id, dropout);
  cpu::embedding_forward(detail::cpu_i32(op, "ids", ids), detail::cpu_f32(op, "table", table),
                         detail::cpu_f32(op, "out", out), rows, vocab, d_model, seq_len, scale,
                         pad_id);
  // The reference: the two ops one after the other.
  if (dropout.p > 0) dropout_forward(out, out, dropout.p, dropout.key);
}

void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id, const EmbeddingDropout& dropout,
                        const EmbeddingRowOrder* order) {
  constexpr const char* op = "embedding_backward";
  const int64_t rows = ids.dim(0);
  detail::require_rank(op, "ids", ids, 1, "[rows]");
  detail::require_rank(op, "d_table", d_table, 2, "[vocab, d_model]");
  const int64_t vocab = d_table.dim(0), d_model = d_table.dim(1);
  check_shape(op, "d_out", d_out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  check_same_device(op, {&ids, &d_out, &d_table});
  detail::require_dropout_p(op, dropout.p);
  if (detail::call_device({&ids, &d_out, &d_table}) == Device::cuda)
    return cuda::embedding_backward(ids, d_out, d_table, scale, pad_id, dropout, order);
  const float* grad = detail::cpu_f32(op, "d_out", d_out);
  // The reference: dropout_backward into a copy (d_out stays as it was), then the embedding's.
  std::vector<float> dropped;
  if (dropout.p > 0) {
    dropped.assign(grad, grad + rows * d_model);
    Tensor view(dropped.data(), DType::f32, Device::cpu, {rows, d_model});
    dropout_backward(view, view, dropout.p, dropout.key);
    grad = dropped.data();
  }
  cpu::embedding_backward(detail::cpu_i32(op, "ids", ids), grad,
                          detail::cpu_f32(op, "d_table", d_table), rows, vocab, d_model, scale,
                          pad_id);
}

}  // namespace nmt
