// CPU reference of the fused attention: gathers the strided operands into dense copies, runs the
// unfused reference (kernels/cpu/attention.h) and derives or consumes the log-sum-exp. Cost is the
// reference's plus O(T * S * head_dim) for backward's recomputed probabilities; it is a reference.
#include "kernels/cpu/fused_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"

namespace nmt::cpu {
namespace {

void check_lengths(const char* op, const int32_t* kv_lengths, const AttentionShape& shape) {
  for (int64_t b = 0; b < shape.batch; ++b)
    if (kv_lengths[b] < 0 || kv_lengths[b] > shape.kv_len)
      throw std::invalid_argument(std::string(op) + ": kv_lengths[" + std::to_string(b) +
                                  "] = " + std::to_string(kv_lengths[b]) +
                                  " is outside [0, kv_len = " + std::to_string(shape.kv_len) + "]");
}

// [rows, heads * head_dim] dense copy of an operand's head columns.
std::vector<float> gather(HeadColumns x, int64_t rows, int64_t width) {
  std::vector<float> dense(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x.data + r * x.stride, x.data + r * x.stride + width, dense.begin() + r * width);
  return dense;
}

void scatter(const std::vector<float>& dense, int64_t rows, int64_t width, MutableHeadColumns x) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy(dense.begin() + r * width, dense.begin() + (r + 1) * width, x.data + r * x.stride);
}

// Scaled score of query t and key s of (sentence b, head h) in the dense layouts.
float scaled_score(const std::vector<float>& q, const std::vector<float>& k,
                   const AttentionShape& shape, int64_t b, int64_t h, int64_t t, int64_t s,
                   float scale) {
  const int64_t dh = shape.head_dim, width = shape.heads * dh;
  const float* q_row = q.data() + (b * shape.q_len + t) * width + h * dh;
  const float* k_row = k.data() + (b * shape.kv_len + s) * width + h * dh;
  float dot = 0.0f;
  for (int64_t d = 0; d < dh; ++d) dot += q_row[d] * k_row[d];
  return dot * scale;
}

int64_t visible_keys(const AttentionShape& shape, int64_t length, int64_t t) {
  return shape.causal ? std::min<int64_t>(length, t + 1) : length;
}

}  // namespace

void fused_attention_forward(HeadColumns q, HeadColumns k, HeadColumns v, const int32_t* kv_lengths,
                             float* out, float* lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key) {
  check_lengths("fused_attention_forward", kv_lengths, shape);
  const int64_t T = shape.q_len, S = shape.kv_len, width = shape.heads * shape.head_dim;
  const std::vector<float> dense_q = gather(q, shape.batch * T, width),
                           dense_k = gather(k, shape.batch * S, width),
                           dense_v = gather(v, shape.batch * S, width);
  std::vector<float> probs(static_cast<size_t>(shape.batch * shape.heads * T * S));
  attention_forward(dense_q.data(), dense_k.data(), dense_v.data(), kv_lengths, out, probs.data(),
                    shape, dropout_p, key);
  // The most probable key has the largest score m and probability 1 / sum exp(score - m), so
  // lse = m + log(sum) = m - log(p_max): one dot product per query.
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
#pragma omp parallel for schedule(static) if (shape.batch * shape.heads * T * S > (1 << 16))
  for (int64_t bh = 0; bh < shape.batch * shape.heads; ++bh) {
    const int64_t b = bh / shape.heads, h = bh % shape.heads;
    for (int64_t t = 0; t < T; ++t) {
      const float* row = probs.data() + (bh * T + t) * S;
      const int64_t visible = visible_keys(shape, kv_lengths[b], t);
      if (visible == 0) {
        lse[bh * T + t] = -INFINITY;
        continue;
      }
      const int64_t best = std::max_element(row, row + visible) - row;
      lse[bh * T + t] =
          scaled_score(dense_q, dense_k, shape, b, h, t, best, scale) - std::log(row[best]);
    }
  }
}

void fused_attention_backward(const float* d_out, HeadColumns q, HeadColumns k, HeadColumns v,
                              const float* lse, const int32_t* kv_lengths, MutableHeadColumns dq,
                              MutableHeadColumns dk, MutableHeadColumns dv,
                              const AttentionShape& shape, float dropout_p, const RngKey& key) {
  check_lengths("fused_attention_backward", kv_lengths, shape);
  const int64_t T = shape.q_len, S = shape.kv_len, width = shape.heads * shape.head_dim;
  const std::vector<float> dense_q = gather(q, shape.batch * T, width),
                           dense_k = gather(k, shape.batch * S, width),
                           dense_v = gather(v, shape.batch * S, width);
  // P = exp(score - lse) on the visible keys, 0 elsewhere (and for a query that sees no key).
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  std::vector<float> probs(static_cast<size_t>(shape.batch * shape.heads * T * S), 0.0f);
#pragma omp parallel for schedule(static) if (shape.batch * shape.heads * T * S > (1 << 16))
  for (int64_t bh = 0; bh < shape.batch * shape.heads; ++bh) {
    const int64_t b = bh / shape.heads, h = bh % shape.heads;
    for (int64_t t = 0; t < T; ++t) {
      float* row = probs.data() + (bh * T + t) * S;
      const int64_t visible = visible_keys(shape, kv_lengths[b], t);
      for (int64_t s = 0; s < visible; ++s)
        row[s] =
            std::exp(scaled_score(dense_q, dense_k, shape, b, h, t, s, scale) - lse[bh * T + t]);
    }
  }
  std::vector<float> dense_dq(dense_q.size()), dense_dk(dense_k.size()), dense_dv(dense_v.size());
  attention_backward(d_out, dense_q.data(), dense_k.data(), dense_v.data(), probs.data(),
                     kv_lengths, dense_dq.data(), dense_dk.data(), dense_dv.data(), shape,
                     dropout_p, key);
  scatter(dense_dq, shape.batch * T, width, dq);
  scatter(dense_dk, shape.batch * S, width, dk);
  scatter(dense_dv, shape.batch * S, width, dv);
}

}  // namespace nmt::cpu
