// CPU reference of the token embedding: scaled table lookup plus sinusoid positions.
#include "kernels/cpu/embedding.h"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/embedding.h"

namespace nmt::cpu {
namespace {

void check_ids(const char* op, const int32_t* ids, int64_t rows, int64_t vocab, int32_t pad_id) {
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] == pad_id) continue;
    if (ids[r] < 0 || ids[r] >= vocab)
      throw std::invalid_argument(std::string(op) + ": id " + std::to_string(ids[r]) + " at row " +
                                  std::to_string(r) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
  }
}

}  // namespace

void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t rows,
                       int64_t vocab, int64_t d_model, int64_t seq_len, float scale,
                       int32_t pad_id) {
  check_ids("embedding_forward", ids, rows, vocab, pad_id);
  // The sinusoid depends only on (position, dim): tabulate it once per call rather than calling
  // exp/sin/cos for every element of the batch.
  std::vector<float> positions(static_cast<size_t>(seq_len * d_model));  // [seq_len, d_model]
  for (int64_t pos = 0; pos < seq_len; ++pos)
    for (int64_t d = 0; d < d_model; ++d)
      positions[pos * d_model + d] = sinusoid_position(pos, d, d_model);

#pragma omp parallel for schedule(static) if (rows * d_model > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* out_row = out + r * d_model;
    if (ids[r] == pad_id) {
      for (int64_t d = 0; d < d_model; ++d) out_row[d] = 0.0f;
      continue;
    }
    const float* table_row = table + static_cast<int64_t>(ids[r]) * d_model;
    const float* position_row = positions.data() + (r % seq_len) * d_model;
    for (int64_t d = 0; d < d_model; ++d) out_row[d] = table_row[d] * scale + position_row[d];
  }
}

void embedding_backward(const int32_t* ids, const float* d_out, float* d_table, int64_t rows,
                        int64_t vocab, int64_t d_model, float scale, int32_t pad_id) {
  check_ids("embedding_backward", ids, rows, vocab, pad_id);
  // Serial over rows: several rows may share an id, and a fixed order keeps the sum deterministic.
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] == pad_id) continue;
    float* grad_row = d_table + static_cast<int64_t>(ids[r]) * d_model;
    const float* d_out_row = d_out + r * d_model;
    for (int64_t d = 0; d < d_model; ++d) grad_row[d] += scale * d_out_row[d];
  }
}

}  // namespace nmt::cpu
