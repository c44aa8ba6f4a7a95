// CPU reference of the token embedding (scaled lookup + sinusoid positions) and its backward.
#pragma once

#include <cstdint>

namespace nmt::cpu {

// ids:   [rows] i32, row r is position r % seq_len of its sentence
// table: [vocab, d_model] f32
// out:   [rows, d_model] f32, written; pad rows are all zeros.
// Throws std::invalid_argument for an id outside [0, vocab) that is not pad_id.
void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t rows,
                       int64_t vocab, int64_t d_model, int64_t seq_len, float scale,
                       int32_t pad_id);

// d_out:   [rows, d_model] f32
// d_table: [vocab, d_model] f32, accumulated: d_table[id] += scale * d_out[row], pad rows skipped.
void embedding_backward(const int32_t* ids, const float* d_out, float* d_table, int64_t rows,
                        int64_t vocab, int64_t d_model, float scale, int32_t pad_id);

}  // namespace nmt::cpu
