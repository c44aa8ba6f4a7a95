// Dispatch of the incremental-decoding ops (kernels/decode_ops.h) to the CPU or CUDA backend, with
// the shape checks both share.
#include "kernels/decode_ops.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/decode_ops.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/op_checks.h"

namespace nmt {

void embedding_forward_at(const Tensor& ids, const Tensor& positions, const Tensor& table,
                          Tensor& out, float scale, int32_t pad_id) {
  constexpr const char* op = "embedding_forward_at";
  detail::require_rank(op, "ids", ids, 1, "[rows]");
  detail::require_rank(op, "table", table, 2, "[vocab, d_model]");
  const int64_t rows = ids.dim(0), vocab = table.dim(0), d_model = table.dim(1);
  check_shape(op, "positions", positions, {rows});
  check_shape(op, "out", out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  detail::require_dtype(op, "positions", positions, DType::i32);
  check_same_device(op, {&ids, &positions, &table, &out});
  if (detail::call_device({&ids, &positions, &table, &out}) == Device::cuda)
    return cuda::embedding_forward_at(ids, positions, table, out, scale, pad_id);
  cpu::embedding_forward_at(detail::cpu_i32(op, "ids", ids),
                            detail::cpu_i32(op, "positions", positions),
                            detail::cpu_f32(op, "table", table), detail::cpu_f32(op, "out", out),
                            rows, vocab, d_model, scale, pad_id);
}

void cache_write_position(const Tensor& x, const Tensor& positions, Tensor& cache, int64_t x_col) {
  constexpr const char* op = "cache_write_position";
  detail::require_rank(op, "x", x, 2, "[rows, x_width]");
  detail::require_rank(op, "cache", cache, 3, "[rows, cache_len, width]");
  const int64_t rows = x.dim(0), cache_len = cache.dim(1), width = cache.dim(2);
  if (x_col < 0 || x_col + width > x.dim(1))
    throw std::invalid_argument(std::string(op) + ": columns [" + std::to_string(x_col) + ", " +
                                std::to_string(x_col + width) + ") are outside x " +
                                x.shape_string());
  // Without an offset x is the rows themselves: a wider x is a caller's mistake, not a slice.
  if (x_col == 0) check_shape(op, "x", x, {rows, width});
  check_shape(op, "positions", positions, {rows});
  check_shape(op, "cache", cache, {rows, cache_len, width});
  detail::require_dtype(op, "positions", positions, DType::i32);
  detail::require_dtype(op, "cache", cache, x.dtype);
  check_same_device(op, {&x, &positions, &cache});
  if (rows == 0 || width == 0) return;
  if (x.empty() || positions.empty() || cache.empty())
    throw std::invalid_argument(std::string(op) + ": x, positions or cache has no data");
  if (detail::call_device({&x, &positions, &cache}) == Device::cuda)
    return cuda::cache_write_position(x, positions, cache, x_col);
  const size_t element = dtype_size(x.dtype);
  cpu::cache_write_position(static_cast<const char*>(x.data) + static_cast<size_t>(x_col) * element,
                            static_cast<size_t>(x.dim(1)) * element, positions.i32(), cache.data,
                            rows, cache_len, static_cast<size_t>(width) * element);
}

void gather_blocks(const Tensor& src, const Tensor& index, Tensor& dst, int64_t used_len) {
  constexpr const char* op = "gather_blocks";
  detail::require_rank(op, "src", src, 3, "[src_blocks, block_len, width]");
  detail::require_rank(op, "index", index, 1, "[n]");
  detail::require_rank(op, "dst", dst, 3, "[dst_blocks, block_len, width]");
  detail::require_dtype(op, "index", index, DType::i32);
  detail::require_dtype(op, "dst", dst, src.dtype);
  const int64_t n = index.dim(0), block_len = src.dim(1), width = src.dim(2);
  if (dst.dim(1) != block_len || dst.dim(2) != width || dst.dim(0) < n)
    throw std::invalid_argument(std::string(op) + ": dst " + dst.shape_string() + " cannot hold " +
                                std::to_string(n) + " blocks of src " + src.shape_string());
  if (used_len < 0 || used_len > block_len)
    throw std::invalid_argument(std::string(op) + ": used_len " + std::to_string(used_len) +
                                " is outside [0, block_len = " + std::to_string(block_len) + "]");
  check_same_device(op, {&src, &index, &dst});
  if (n == 0 || used_len == 0 || width == 0) return;
  if (src.empty() || index.empty() || dst.empty())
    throw std::invalid_argument(std::string(op) + ": src, index or dst has no data");
  if (detail::call_device({&src, &index, &dst}) == Device::cuda)
    return cuda::gather_blocks(src, index, dst, used_len);
  const size_t row_bytes = static_cast<size_t>(width) * dtype_size(src.dtype);
  cpu::gather_blocks(src.data, src.dim(0), index.i32(), n, dst.data,
                     static_cast<size_t>(block_len) * row_bytes,
                     static_cast<size_t>(used_len) * row_bytes);
}

void logits_top_k(const Tensor& logits, int32_t extra_id, Tensor& top_ids, Tensor& top_logits,
                  Tensor& row_stats) {
  constexpr const char* op = "logits_top_k";
  detail::require_rank(op, "logits", logits, 2, "[rows, vocab]");
  detail::require_rank(op, "top_ids", top_ids, 2, "[rows, k]");
  const int64_t rows = logits.dim(0), vocab = logits.dim(1), k = top_ids.dim(1);
  check_shape(op, "top_ids", top_ids, {rows, k});
  check_shape(op, "top_logits", top_logits, {rows, k});
  check_shape(op, "row_stats", row_stats, {rows, 2});
  detail::require_dtype(op, "top_ids", top_ids, DType::i32);
  detail::require_dtype(op, "top_logits", top_logits, DType::f32);
  detail::require_dtype(op, "row_stats", row_stats, DType::f32);
  if (k < 1 || k > std::min(vocab, kMaxTopK))
    throw std::invalid_argument(std::string(op) + ": k = " + std::to_string(k) +
                                " must be in [1, min(vocab " + std::to_string(vocab) + ", " +
                                std::to_string(kMaxTopK) + ")]");
  if (extra_id < 0 || extra_id >= vocab)
    throw std::invalid_argument(std::string(op) + ": extra_id " + std::to_string(extra_id) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  check_same_device(op, {&logits, &top_ids, &top_logits, &row_stats});
  if (rows == 0) return;
  if (detail::call_device({&logits, &top_ids, &top_logits, &row_stats}) == Device::cuda)
    return cuda::logits_top_k(logits, extra_id, top_ids, top_logits, row_stats);
  cpu::logits_top_k(detail::cpu_f32(op, "logits", logits), rows, vocab, k, extra_id,
                    detail::cpu_i32(op, "top_ids", top_ids),
                    detail::cpu_f32(op, "top_logits", top_logits),
                    detail::cpu_f32(op, "row_stats", row_stats));
}

bool cached_attention_fits(int64_t head_dim, int64_t length) {
  return cuda::cached_attention_shared_bytes(head_dim, length) <= cuda::kCachedAttentionSharedLimit;
}

void cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                      const Tensor& lengths, Tensor& out, int64_t heads, int64_t q_col) {
  constexpr const char* op = "cached_attention";
  detail::require_rank(op, "q", q, 2, "[blocks * queries, q_width]");
  detail::require_rank(op, "keys", keys, 3, "[blocks, length, heads * head_dim]");
  const int64_t rows = q.dim(0), blocks = keys.dim(0), length = keys.dim(1), width = keys.dim(2);
  if (q_col < 0 || q_col + width > q.dim(1))
    throw std::invalid_argument(std::string(op) + ": query columns [" + std::to_string(q_col) +
                                ", " + std::to_string(q_col + width) + ") are outside q " +
                                q.shape_string());
  if (heads < 1 || width % heads != 0)
    throw std::invalid_argument(std::string(op) + ": heads = " + std::to_string(heads) +
                                " does not divide the width " + std::to_string(width));
  if (rows == 0 && blocks == 0) return;  // an empty batch
  if (blocks < 1 || rows % blocks != 0)
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(rows) +
                                " query rows are not a whole number per block of " +
                                std::to_string(blocks));
  check_shape(op, "keys", keys, {blocks, length, width});
  check_shape(op, "values", values, {blocks, length, width});
  check_shape(op, "lengths", lengths, {blocks});
  check_shape(op, "out", out, {rows, width});
  detail::require_dtype(op, "lengths", lengths, DType::i32);
  detail::require_dtype(op, "keys", keys, q.dtype);
  detail::require_dtype(op, "values", values, q.dtype);
  detail::require_dtype(op, "out", out, q.dtype);
  check_same_device(op, {&q, &keys, &values, &lengths, &out});
  if (rows == 0 || width == 0) return;
  if (q.empty() || keys.empty() || values.empty() || lengths.empty() || out.empty())
    throw std::invalid_argument(std::string(op) + ": q, keys, values, lengths or out has no data");
  if (detail::call_device({&q, &keys, &values, &lengths, &out}) == Device::cuda) {
    if (heads > 65535)  // the grid's y dimension
      throw std::invalid_argument(std::string(op) + ": " + std::to_string(heads) +
                                  " heads exceed the GPU kernel's 65535");
    if (!cached_attention_fits(width / heads, length))
      throw std::invalid_argument(std::string(op) + ": a cache of " + std::to_string(length) +
                                  " positions of head size " + std::to_string(width / heads) +
                                  " exceeds the GPU kernel's shared memory");
    return cuda::cached_attention(q, keys, values, lengths, out, heads, q_col);
  }
  cpu::cached_attention(detail::cpu_f32(op, "q", q) + q_col, q.dim(1),
                        detail::cpu_f32(op, "keys", keys), detail::cpu_f32(op, "values", values),
                        detail::cpu_i32(op, "lengths", lengths), detail::cpu_f32(op, "out", out),
                        blocks, rows / blocks, length, heads, width / heads);
}

}  // namespace nmt
