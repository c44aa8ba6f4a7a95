// Token embedding: out = table[id] * scale + sinusoid(position), and its (accumulating) backward.
#pragma once

#include <cstdint>

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// The embedding's own dropout, done inside the embedding ops (p = 0: none). Forward: out =
// dropout_forward(the embedding, p, key); backward: d_table gets the embedding's gradient of
// dropout_backward(d_out, p, key), d_out unchanged. The same bits as the separate dropout op.
struct EmbeddingDropout {
  float p = 0.0f;
  RngKey key{};
};

// The backward's grouping of rows by id, made off the device (data/batch.h: add_row_orders), so
// the op need not sort. keys: [rows] i32 in ascending order, each a row's id, or any key >= vocab
// for a row to skip (pad); rows: [rows] i32, the row of each key, ascending among equal keys (a
// stable sort). On the op's device. The result is the device sort's, bit for bit, where every id
// is in [0, vocab) or pad.
struct EmbeddingRowOrder {
  Tensor keys;
  Tensor rows;
};

// ids:    [rows] i32, rows = batch * seq_len, row r is position r % seq_len of its sentence
// table:  [vocab, d_model]
// out:    [rows, d_model]; rows whose id is pad_id are all zeros (no position either)
// Sinusoid (fairseq/tensor2tensor layout): half = d_model/2,
// inv_freq_i = exp(-i*ln(10000)/max(half-1, 1)), dims [0, half) hold sin(pos*inv_freq_i),
// dims [half, 2*half) cos(pos*inv_freq_i); an odd last dim is 0.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id, const EmbeddingDropout& dropout = {});

// d_out:   [rows, d_model]
// d_table: [vocab, d_model], accumulated (+=): d_table[id] += scale * d_out[row]; pad rows skipped.
// order: null (the op sorts), or the rows grouped as EmbeddingRowOrder says (the CPU backend needs
// no order and ignores it).
void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id, const EmbeddingDropout& dropout = {},
                        const EmbeddingRowOrder* order = nullptr);

// The sinusoid value for one (position, dim), so every backend and test agrees on it.
float sinusoid_position(int64_t position, int64_t dim, int64_t d_model);

}  // namespace nmt
