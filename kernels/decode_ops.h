// Ops of incremental decoding (engine/decode/incremental_decoder.h): the token embedding at each
// row's position, writing each row's position of a key/value cache, gathering cache blocks (beam
// reorder), and the per-row top-k and log-sum-exp of the logits that beam search expands from.
#pragma once

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt {

// ids:       [rows] i32, row r at position positions[r] of its sentence
// positions: [rows] i32 on the same device, each >= 0 (checked on the CPU only)
// table:     [vocab, d_model]
// out:       [rows, d_model] written: table[ids[r]] * scale + sinusoid(positions[r]), bit for
//            bit what embedding_forward writes for a row at that position; pad rows are zeros.
// The positions live in device memory (not in the launch) so that a decoder step captured into a
// CUDA graph replays correctly at every position.
void embedding_forward_at(const Tensor& ids, const Tensor& positions, const Tensor& table,
                          Tensor& out, float scale, int32_t pad_id);

// x:         [rows, x_width], of which columns [x_col, x_col + width) are written (a slice of a
//            joined q | k | v projection, say)
// positions: [rows] i32 on the same device, each in [0, cache_len) (checked on the CPU; on the GPU
//            a position outside that range leaves its row unwritten)
// cache:     [rows, cache_len, width], same dtype and device;
//            cache[r, positions[r], :] = x[r, x_col : x_col + width].
// Any dtype (a copy).
void cache_write_position(const Tensor& x, const Tensor& positions, Tensor& cache,
                          int64_t x_col = 0);

// src:   [src_blocks, block_len, width]
// index: [n] i32 on the tensors' device, each in [0, src_blocks) (checked on the CPU; on the GPU
//        an index outside that range leaves its destination block untouched)
// dst:   [dst_blocks >= n, block_len, width], same dtype, must not overlap src.
// dst[i, t, :] = src[index[i], t, :] for i < n, t < used_len. Any dtype (a copy).
void gather_blocks(const Tensor& src, const Tensor& index, Tensor& dst, int64_t used_len);

// The most candidates logits_top_k returns per row on the GPU (beam search asks for beam + 1).
inline constexpr int64_t kMaxTopK = 16;

// logits:     [rows, vocab] (CPU: f32; CUDA: f32, bf16 or f16)
// top_ids:    [rows, k] i32 written: each row's k highest logits' ids, highest first; equal logits
//             keep the lower id first (so k = 1 is the argmax greedy search takes); a NaN logit
//             ranks as -inf. 1 <= k <=
//             min(vocab, kMaxTopK).
// top_logits: [rows, k] f32 written: those logits.
// row_stats:  [rows, 2] f32 written: the row's log-sum-exp log(sum_j exp(logit_j)), then its
//             logit at extra_id (beam search's eos, the one token allowed at the length limit).
// The log-probability of id j is logit_j - log-sum-exp: the host needs these 2k + 2 numbers per
// row, not the row.
void logits_top_k(const Tensor& logits, int32_t extra_id, Tensor& top_ids, Tensor& top_logits,
                  Tensor& row_stats);

// Whether cached_attention takes a head of head_dim over a cache of `length` positions on the GPU:
// its scores and the head's slices live in one block's shared memory (48 KiB, about 11,800
// positions at head_dim 64). Decoding uses the general attention_forward where it does not.
bool cached_attention_fits(int64_t head_dim, int64_t length);

// A decoder step's attention over cached keys and values, in one kernel on the GPU:
// q:       [blocks * queries, q_width], the queries in columns [q_col, q_col + heads * head_dim);
//          query row r belongs to block r / queries (decoder self-attention: one query per block;
//          cross-attention: a source's beam of queries)
// keys:    [blocks, length, heads * head_dim], same dtype and device
// values:  [blocks, length, heads * head_dim]
// lengths: [blocks] i32: the first lengths[b] positions of block b are visible (a value above
//          length counts as length; 0 or below gives a zero output row)
// out:     [blocks * queries, heads * head_dim] written:
//          out[r, h] = softmax(q[r, h] . keys[b, :n, h]^T / sqrt(head_dim)) . values[b, :n, h]
// What attention_forward computes without dropout: on the GPU its arithmetic too (probabilities
// rounded to the activation dtype before the weighted sum), in another order of additions. CPU:
// f32; CUDA: f32, bf16 or f16 where cached_attention_fits.
void cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                      const Tensor& lengths, Tensor& out, int64_t heads, int64_t q_col = 0);

}  // namespace nmt
