// The CUDA implementations of the incremental-decoding ops (kernels/decode_ops.h), with the same
// signatures; they enqueue on the current stream (kernels/cuda/stream.h) and do not synchronise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/tensor.h"

namespace nmt::cuda {

// ids: [rows] i32; positions: [rows] i32; table: [vocab, d_model] T; out: [rows, d_model] T. An id
// outside [0, vocab) gives a zero row, like pad_id (ids and positions are not read back to the
// host).
void embedding_forward_at(const Tensor& ids, const Tensor& positions, const Tensor& table,
                          Tensor& out, float scale, int32_t pad_id);
// x: [rows, x_width], columns [x_col, x_col + width) written; positions: [rows] i32; cache: [rows,
// cache_len, width]; any dtype, all on the GPU. A position outside [0, cache_len) leaves its row
// unwritten.
void cache_write_position(const Tensor& x, const Tensor& positions, Tensor& cache, int64_t x_col);
// src: [src_blocks, block_len, width]; index: [n] i32; dst: [>= n, block_len, width]; any dtype.
void gather_blocks(const Tensor& src, const Tensor& index, Tensor& dst, int64_t used_len);

// logits: [rows, vocab] T; top_ids: [rows, k] i32; top_logits: [rows, k] f32; row_stats: [rows, 2]
// f32 (kernels/decode_ops.h). One block per row; k <= kMaxTopK.
void logits_top_k(const Tensor& logits, int32_t extra_id, Tensor& top_ids, Tensor& top_logits,
                  Tensor& row_stats);

// q: [rows, q_width] T, columns [q_col, q_col + width) read; keys, values: [blocks, length, width]
// T; lengths: [blocks] i32; out: [rows, width] T (kernels/decode_ops.h). One block of 128 threads
// per (row, head), in one launch.
void cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                      const Tensor& lengths, Tensor& out, int64_t heads, int64_t q_col);
// The dynamic shared memory one block of it takes, and the most it may take (no opt-in needed).
size_t cached_attention_shared_bytes(int64_t head_dim, int64_t length);
inline constexpr size_t kCachedAttentionSharedLimit = 48 * 1024;

}  // namespace nmt::cuda
