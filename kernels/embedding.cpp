// Dispatch of the token embedding (kernels/embedding.h) to the CPU or CUDA backend, and the
// sinusoid formula every backend shares.
#include "kernels/embedding.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/embedding.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/dispatch_checks.h"

namespace nmt {

float sinusoid_position(int64_t position, int64_t dim, int64_t d_model) {
  const int64_t half = d_model / 2;
  if (dim < 0 || dim >= 2 * half) return 0.0f;  // the odd last dim of an odd d_model
  const int64_t i = dim < half ? dim : dim - half;
  // tensor2tensor guards a single frequency (d_model 2 or 3) against 0/0 the same way.
  const double denominator = static_cast<double>(std::max<int64_t>(half - 1, 1));
  const double inv_freq = std::exp(-static_cast<double>(i) * std::log(10000.0) / denominator);
  const double angle = static_cast<double>(position) * inv_freq;
  return static_cast<float>(dim < half ? std::sin(angle) : std::cos(angle));
}

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id) {
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
  if (detail::call_device({&ids, &table, &out}) == Device::cuda) return cuda::embedding_forward(ids, table, out, seq_len, scale, pad_id);
  cpu::embedding_forward(detail::cpu_i32(op, "ids", ids), detail::cpu_f32(op, "table", table),
                         detail::cpu_f32(op, "out", out), rows, vocab, d_model, seq_len, scale,
                         pad_id);
}

void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id) {
  constexpr const char* op = "embedding_backward";
  const int64_t rows = ids.dim(0);
  detail::require_rank(op, "ids", ids, 1, "[rows]");
  detail::require_rank(op, "d_table", d_table, 2, "[vocab, d_model]");
  const int64_t vocab = d_table.dim(0), d_model = d_table.dim(1);
  check_shape(op, "d_out", d_out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  check_same_device(op, {&ids, &d_out, &d_table});
  if (detail::call_device({&ids, &d_out, &d_table}) == Device::cuda)
    return cuda::embedding_backward(ids, d_out, d_table, scale, pad_id);
  cpu::embedding_backward(detail::cpu_i32(op, "ids", ids), detail::cpu_f32(op, "d_out", d_out),
                          detail::cpu_f32(op, "d_table", d_table), rows, vocab, d_model, scale,
                          pad_id);
}

}  // namespace nmt
