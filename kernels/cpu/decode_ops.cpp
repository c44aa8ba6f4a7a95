// CPU reference of the incremental-decoding ops: the embedding and the cache write at each row's
// position, the block gather, the per-row top-k.
#include "kernels/cpu/decode_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/embedding.h"

namespace nmt::cpu {

namespace {

std::string row_text(int64_t row) {
  return " at row " + std::to_string(row);
}

}  // namespace

void embedding_forward_at(const int32_t* ids, const int32_t* positions, const float* table,
                          float* out, int64_t rows, int64_t vocab, int64_t d_model, float scale,
                          int32_t pad_id) {
  // The sinusoid row of the last position met: decoding steps give every row the same position.
  std::vector<float> sinusoid(static_cast<size_t>(d_model));
  int64_t sinusoid_position_now = -1;
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0)
      throw std::invalid_argument("embedding_forward_at: position " + std::to_string(positions[r]) +
                                  row_text(r) + " is negative");
    float* out_row = out + r * d_model;
    if (ids[r] == pad_id) {
      std::memset(out_row, 0, static_cast<size_t>(d_model) * sizeof(float));
      continue;
    }
    if (ids[r] < 0 || ids[r] >= vocab)
      throw std::invalid_argument("embedding_forward_at: id " + std::to_string(ids[r]) +
                                  row_text(r) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
    // The same float values as embedding_forward's table (sinusoid_position), then the same
    // multiply-add: the row embedding_forward writes at that position, to the bit.
    if (positions[r] != sinusoid_position_now) {
      sinusoid_position_now = positions[r];
      for (int64_t d = 0; d < d_model; ++d)
        sinusoid[d] = sinusoid_position(sinusoid_position_now, d, d_model);
    }
    const float* table_row = table + static_cast<int64_t>(ids[r]) * d_model;
    for (int64_t d = 0; d < d_model; ++d) out_row[d] = table_row[d] * scale + sinusoid[d];
  }
}

void cache_write_position(const void* x, size_t x_stride, const int32_t* positions, void* cache,
                          int64_t rows, int64_t cache_len, size_t row_bytes) {
  const auto* from = static_cast<const char*>(x);
  auto* to = static_cast<char*>(cache);
  for (int64_t r = 0; r < rows; ++r) {
    if (positions[r] < 0 || positions[r] >= cache_len)
      throw std::invalid_argument("cache_write_position: position " + std::to_string(positions[r]) +
                                  row_text(r) + " is outside the cache's [0, " +
                                  std::to_string(cache_len) + ")");
    std::memcpy(to + static_cast<size_t>(r * cache_len + positions[r]) * row_bytes,
                from + static_cast<size_t>(r) * x_stride, row_bytes);
  }
}

void gather_blocks(const void* src, int64_t src_blocks, const int32_t* index, int64_t n, void* dst,
                   size_t block_bytes, size_t used_bytes) {
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0 || index[i] >= src_blocks)
      throw std::invalid_argument("gather_blocks: index[" + std::to_string(i) +
                                  "] = " + std::to_string(index[i]) + " is outside [0, " +
                                  std::to_string(src_blocks) + ")");
    std::memcpy(to + static_cast<size_t>(i) * block_bytes,
                from + static_cast<size_t>(index[i]) * block_bytes, used_bytes);
  }
}

void logits_top_k(const float* logits, int64_t rows, int64_t vocab, int64_t k, int32_t extra_id,
                  int32_t* top_ids, float* top_logits, float* row_stats) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    // A NaN logit (a diverged model) ranks as -inf, as on the GPU: every id stays comparable.
    const float* raw = logits + r * vocab;
    auto at = [raw](int64_t j) { return std::isnan(raw[j]) ? -INFINITY : raw[j]; };
    int32_t* ids = top_ids + r * k;
    // Insertion into a list sorted by (logit descending, id ascending): ids arrive in increasing
    // order, so an equal logit never displaces an earlier one.
    int64_t filled = 0;
    float top = -INFINITY;
    for (int64_t j = 0; j < vocab; ++j) {
      top = std::max(top, at(j));
      if (filled == k && !(at(j) > at(ids[k - 1]))) continue;
      int64_t pos = filled < k ? filled++ : k - 1;
      while (pos > 0 && at(ids[pos - 1]) < at(j)) {
        ids[pos] = ids[pos - 1];
        --pos;
      }
      ids[pos] = static_cast<int32_t>(j);
    }
    for (int64_t i = 0; i < k; ++i) top_logits[r * k + i] = at(ids[i]);
    double sum = 0;  // float exponentials (each in (0, 1]), summed in double
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(at(j) - top);
    row_stats[2 * r] = static_cast<float>(top + std::log(sum));
    row_stats[2 * r + 1] = at(extra_id);
  }
}

void cached_attention(const float* q, int64_t q_stride, const float* keys, const float* values,
                      const int32_t* lengths, float* out, int64_t blocks, int64_t queries,
                      int64_t length, int64_t heads, int64_t head_dim) {
  const int64_t width = heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < blocks * queries; ++row) {
    const int64_t block = row / queries;
    const int64_t visible = std::clamp<int64_t>(lengths[block], 0, length);
    const float* k_block = keys + block * length * width;
    const float* v_block = values + block * length * width;
    std::vector<float> scores(static_cast<size_t>(visible));
    for (int64_t h = 0; h < heads; ++h) {
      const float* q_head = q + row * q_stride + h * head_dim;
      float* out_head = out + row * width + h * head_dim;
      float top = -INFINITY;
      for (int64_t p = 0; p < visible; ++p) {
        const float* k_head = k_block + p * width + h * head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) dot += q_head[d] * k_head[d];
        dot *= scale;  // after the dot product, as the general path's GEMM applies its alpha
        scores[p] = dot;
        top = std::max(top, dot);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < visible; ++p) {
        scores[p] = std::exp(scores[p] - top);
        sum += scores[p];
      }
      for (int64_t d = 0; d < head_dim; ++d) {
        float acc = 0.0f;
        for (int64_t p = 0; p < visible; ++p)
          acc += scores[p] * v_block[p * width + h * head_dim + d];
        out_head[d] = visible > 0 ? acc / sum : 0.0f;
      }
    }
  }
}

}  // namespace nmt::cpu
