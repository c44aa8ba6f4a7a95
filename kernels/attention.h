// Multi-head scaled dot-product attention (the core, without the projections), with a key-padding
// mask from per-sentence lengths, an optional causal mask, different query and key lengths
// (cross-attention) and dropout on the attention probabilities.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

struct AttentionShape {
  int64_t batch = 0;
  int64_t q_len = 0;   // T: padded query positions per sentence
  int64_t kv_len = 0;  // S: padded key/value positions per sentence
  int64_t heads = 0;
  int64_t head_dim = 0;
  bool causal = false;  // key s visible to query t only if s <= t
};

// q:          [batch * q_len, heads * head_dim]  (row b*T + t; head h in columns [h*dh, (h+1)*dh))
// k, v:       [batch * kv_len, heads * head_dim]
// kv_lengths: [batch] i32, keys s >= kv_lengths[b] are masked
// out:        [batch * q_len, heads * head_dim] written (=)
// probs:      [batch, heads, q_len, kv_len] f32, softmax before dropout, saved for backward
// Scale is 1/sqrt(head_dim). A query row whose every key is masked gives probs 0 and out 0.
// Dropout element index of prob (b, h, t, s) is ((b*heads + h)*q_len + t)*kv_len + s.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_lengths,
                       Tensor& out, Tensor& probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key);

// d_out: like out; dq like q, dk/dv like k/v, all written (=).
void attention_backward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& probs, const Tensor& kv_lengths, Tensor& dq, Tensor& dk,
                        Tensor& dv, const AttentionShape& shape, float dropout_p, const RngKey& key);

}  // namespace nmt
