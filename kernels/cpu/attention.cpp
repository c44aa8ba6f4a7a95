// CPU reference of multi-head attention. Each (sentence, head) pair is independent and owns
// disjoint slices of every output, so the pairs run in parallel; inside a pair the work is a few
// small matrix products (kernels/cpu/gemm.h) and a row-wise masked softmax, in a fixed order.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dropout_mask.h"
#include "kernels/cpu/gemm.h"

namespace nmt::cpu {
namespace {

// Below this many score multiply-adds a call stays on one thread (decoding steps, tests).
constexpr int64_t kParallelWork = 1 << 15;

bool worth_threads(const AttentionShape& shape) {
  return shape.batch * shape.heads > 1 &&
         shape.batch * shape.heads * shape.q_len * shape.kv_len * shape.head_dim > kParallelWork;
}

void check_lengths(const char* op, const int32_t* kv_lengths, const AttentionShape& shape) {
  for (int64_t b = 0; b < shape.batch; ++b)
    if (kv_lengths[b] < 0 || kv_lengths[b] > shape.kv_len)
      throw std::invalid_argument(std::string(op) + ": kv_lengths[" + std::to_string(b) +
                                  "] = " + std::to_string(kv_lengths[b]) +
                                  " is outside [0, kv_len = " + std::to_string(shape.kv_len) + "]");
}

// Keys [0, visible) are seen by query t; the rest are padding or in its future.
int64_t visible_keys(const AttentionShape& shape, int64_t length, int64_t t) {
  return shape.causal ? std::min<int64_t>(length, t + 1) : length;
}

void zero_rows(float* x, int64_t rows, int64_t cols, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r) std::fill(x + r * stride, x + r * stride + cols, 0.0f);
}

// dst [cols, rows] = src [rows, cols] (src rows `stride` apart).
void transpose(const float* src, int64_t rows, int64_t cols, int64_t stride, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * stride + c];
}

// One (sentence, head): q, out, d_out, dq point at its first query row, k, v, dk, dv at its first
// key row (rows `width` floats apart, head_dim columns used); probs at its [T, S] block. Only the
// first `length` keys are ever read: padded rows of k and v may hold anything, even NaN.
struct Head {
  int64_t length;          // keys of the sentence, kv_lengths[b]
  uint64_t first_element;  // dropout element index of (t = 0, s = 0)
};

// probs [T, S] = softmax over the visible keys of scale * scores (computed in place); 0 elsewhere.
void masked_softmax(const AttentionShape& shape, const Head& head, float scale, float* probs) {
  const int64_t T = shape.q_len, S = shape.kv_len;
  for (int64_t t = 0; t < T; ++t) {
    float* row = probs + t * S;
    const int64_t visible = visible_keys(shape, head.length, t);
    std::fill(row + visible, row + S, 0.0f);
    if (visible == 0) continue;  // every key masked: probabilities (and output) stay 0, not NaN
    float max_score = -INFINITY;
    for (int64_t s = 0; s < visible; ++s) {
      row[s] *= scale;
      max_score = std::max(max_score, row[s]);
    }
    float sum = 0.0f;
    for (int64_t s = 0; s < visible; ++s) {
      row[s] = std::exp(row[s] - max_score);
      sum += row[s];
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t s = 0; s < visible; ++s) row[s] *= inv_sum;
  }
}

// scales [T, L]: the dropout scales of the sentence's keys; dropped [T, L] = probs * scales, the
// probabilities the values are mixed with.
void apply_dropout(const AttentionShape& shape, const Head& head, const float* probs, float p,
                   const RngKey& key, float* scales, float* dropped) {
  const int64_t T = shape.q_len, S = shape.kv_len, L = head.length;
  for (int64_t t = 0; t < T; ++t) {
    dropout_scales(key, head.first_element + static_cast<uint64_t>(t * S), L, p, scales + t * L);
    for (int64_t s = 0; s < L; ++s) dropped[t * L + s] = probs[t * S + s] * scales[t * L + s];
  }
}

// Scratch of one thread, sized for one head.
struct Scratch {
  std::vector<float> transposed;  // [head_dim, S]: Kᵀ or Vᵀ of the head
  std::vector<float> scales;      // [T, S]: dropout scales
  std::vector<float> dropped;     // [T, S]: probabilities after dropout
  std::vector<float> grad;        // [T, S]: gradient of the dropped probabilities, then scores
  explicit Scratch(const AttentionShape& s)
      : transposed(static_cast<size_t>(s.head_dim * s.kv_len)),
        scales(static_cast<size_t>(s.q_len * s.kv_len)),
        dropped(static_cast<size_t>(s.q_len * s.kv_len)),
        grad(static_cast<size_t>(s.q_len * s.kv_len)) {}
};

void forward_head(const float* q, const float* k, const float* v, float* out, float* probs,
                  const Head& head, const AttentionShape& shape, float dropout_p, const RngKey& key,
                  Scratch& scratch) {
  const int64_t T = shape.q_len, S = shape.kv_len, L = head.length, dh = shape.head_dim;
  const int64_t width = shape.heads * dh;
  // scores [T, :L] = q · kᵀ, then the masked softmax.
  transpose(k, L, dh, width, scratch.transposed.data());
  zero_rows(probs, T, L, S);
  gemm_accumulate(T, L, dh, q, width, 1, scratch.transposed.data(), L, probs, S, false);
  masked_softmax(shape, head, 1.0f / std::sqrt(static_cast<float>(dh)), probs);
  // out = dropout(probs) · v over the sentence's keys.
  const float* mixing = probs;
  int64_t mixing_stride = S;
  if (dropout_p > 0.0f) {
    apply_dropout(shape, head, probs, dropout_p, key, scratch.scales.data(),
                  scratch.dropped.data());
    mixing = scratch.dropped.data();
    mixing_stride = L;
  }
  zero_rows(out, T, dh, width);
  gemm_accumulate(T, dh, L, mixing, mixing_stride, 1, v, width, out, width, false);
}

void backward_head(const float* d_out, const float* q, const float* k, const float* v,
                   const float* probs, float* dq, float* dk, float* dv, const Head& head,
                   const AttentionShape& shape, float dropout_p, const RngKey& key,
                   Scratch& scratch) {
  const int64_t T = shape.q_len, S = shape.kv_len, L = head.length, dh = shape.head_dim;
  const int64_t width = shape.heads * dh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  zero_rows(dq, T, dh, width);
  zero_rows(dk, S, dh, width);
  zero_rows(dv, S, dh, width);

  // out = P' · v with P' = dropout(P): dv = P'ᵀ · d_out, dP' = d_out · vᵀ.
  const float* mixing = probs;
  int64_t mixing_stride = S;
  if (dropout_p > 0.0f) {
    apply_dropout(shape, head, probs, dropout_p, key, scratch.scales.data(),
                  scratch.dropped.data());
    mixing = scratch.dropped.data();
    mixing_stride = L;
  }
  gemm_accumulate(L, dh, T, mixing, 1, mixing_stride, d_out, width, dv, width, false);
  float* d_scores = scratch.grad.data();  // [T, L]
  std::fill(d_scores, d_scores + T * L, 0.0f);
  transpose(v, L, dh, width, scratch.transposed.data());
  gemm_accumulate(T, L, dh, d_out, width, 1, scratch.transposed.data(), L, d_scores, L, false);

  // Through the dropout (dP = dP' * scales) and the softmax: dS = P (dP - sum_s P dP), times the
  // 1/sqrt(dh) of the scores.
  for (int64_t t = 0; t < T; ++t) {
    const float* p_row = probs + t * S;
    float* ds_row = d_scores + t * L;
    if (dropout_p > 0.0f)
      for (int64_t s = 0; s < L; ++s) ds_row[s] *= scratch.scales[t * L + s];
    float p_dot_dp = 0.0f;
    for (int64_t s = 0; s < L; ++s) p_dot_dp += p_row[s] * ds_row[s];
    for (int64_t s = 0; s < L; ++s) ds_row[s] = p_row[s] * (ds_row[s] - p_dot_dp) * scale;
  }
  // scores = q · kᵀ: dq = dS · k, dk = dSᵀ · q.
  gemm_accumulate(T, dh, L, d_scores, L, 1, k, width, dq, width, false);
  gemm_accumulate(L, dh, T, d_scores, 1, L, q, width, dk, width, false);
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, const int32_t* kv_lengths,
                       float* out, float* probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key) {
  check_lengths("attention_forward", kv_lengths, shape);
  const int64_t T = shape.q_len, S = shape.kv_len, dh = shape.head_dim;
  const int64_t width = shape.heads * dh;  // row stride of q, k, v, out
#pragma omp parallel if (worth_threads(shape))
  {
    Scratch scratch(shape);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < shape.batch * shape.heads; ++bh) {
      const int64_t b = bh / shape.heads, h = bh % shape.heads;
      const Head head{kv_lengths[b], static_cast<uint64_t>(bh * T * S)};
      forward_head(q + b * T * width + h * dh, k + b * S * width + h * dh,
                   v + b * S * width + h * dh, out + b * T * width + h * dh, probs + bh * T * S,
                   head, shape, dropout_p, key, scratch);
    }
  }
}

void attention_backward(const float* d_out, const float* q, const float* k, const float* v,
                        const float* probs, const int32_t* kv_lengths, float* dq, float* dk,
                        float* dv, const AttentionShape& shape, float dropout_p,
                        const RngKey& key) {
  check_lengths("attention_backward", kv_lengths, shape);
  const int64_t T = shape.q_len, S = shape.kv_len, dh = shape.head_dim;
  const int64_t width = shape.heads * dh;
#pragma omp parallel if (worth_threads(shape))
  {
    Scratch scratch(shape);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < shape.batch * shape.heads; ++bh) {
      const int64_t b = bh / shape.heads, h = bh % shape.heads;
      const Head head{kv_lengths[b], static_cast<uint64_t>(bh * T * S)};
      const int64_t q_offset = b * T * width + h * dh, kv_offset = b * S * width + h * dh;
      backward_head(d_out + q_offset, q + q_offset, k + kv_offset, v + kv_offset,
                    probs + bh * T * S, dq + q_offset, dk + kv_offset, dv + kv_offset, head, shape,
                    dropout_p, key, scratch);
    }
  }
}

}  // namespace nmt::cpu
