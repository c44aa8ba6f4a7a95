// CPU reference of the incremental-decoding ops (kernels/decode_ops.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nmt::cpu {

// ids: [rows] i32; positions: [rows] i32; table: [vocab, d_model] f32; out: [rows, d_model] f32,
// row r at positions[r]. Throws std::invalid_argument for an id outside [0, vocab) that is not
// pad_id, or a negative position.
void embedding_forward_at(const int32_t* ids, const int32_t* positions, const float* table,
                          float* out, int64_t rows, int64_t vocab, int64_t d_model, float scale,
                          int32_t pad_id);

// x: rows of x_stride bytes, row_bytes of each copied; positions: [rows] i32; cache: [rows,
// cache_len, row_bytes]; row r lands at position positions[r]. Throws std::invalid_argument for a
// position outside [0, cache_len).
void cache_write_position(const void* x, size_t x_stride, const int32_t* positions, void* cache,
                          int64_t rows, int64_t cache_len, size_t row_bytes);

// src: [src_blocks, block_bytes]; index: [n] i32; dst: [n.., block_bytes]; copies the first
// used_bytes of each block. Throws std::invalid_argument for an index outside [0, src_blocks).
void gather_blocks(const void* src, int64_t src_blocks, const int32_t* index, int64_t n, void* dst,
                   size_t block_bytes, size_t used_bytes);

// logits: [rows, vocab]; top_ids, top_logits: [rows, k]; row_stats: [rows, 2] (log-sum-exp, logit
// at extra_id). Ranking: higher logit first, equal logits lower id first. The log-sum-exp sums the
// float exponentials in double.
void logits_top_k(const float* logits, int64_t rows, int64_t vocab, int64_t k, int32_t extra_id,
                  int32_t* top_ids, float* top_logits, float* row_stats);

// q: rows of q_stride floats (heads * head_dim used); out: [blocks * queries, heads * head_dim];
// keys, values: [blocks, length, heads * head_dim]; lengths: [blocks] (clamped to [0, length]).
// Scores, softmax and the weighted sum in float, as kernels/decode_ops.h describes.
void cached_attention(const float* q, int64_t q_stride, const float* keys, const float* values,
                      const int32_t* lengths, float* out, int64_t blocks, int64_t queries,
                      int64_t length, int64_t heads, int64_t head_dim);

}  // namespace nmt::cpu
