// CPU reference of multi-head scaled dot-product attention (key padding, causal mask,
// cross-attention lengths, dropout on the probabilities), forward and backward.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace nmt::cpu {

// Layouts as in kernels/attention.h, with T = q_len, S = kv_len, D = heads * head_dim:
// q, out: [batch * T, D]; k, v: [batch * S, D]; kv_lengths: [batch] i32 in [0, S];
// probs: [batch, heads, T, S] written (softmax before dropout). Throws std::invalid_argument for a
// length outside [0, S].
void attention_forward(const float* q, const float* k, const float* v, const int32_t* kv_lengths,
                       float* out, float* probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key);

// d_out: [batch * T, D]; dq: [batch * T, D], dk, dv: [batch * S, D], all written (=).
void attention_backward(const float* d_out, const float* q, const float* k, const float* v,
                        const float* probs, const int32_t* kv_lengths, float* dq, float* dk,
                        float* dv, const AttentionShape& shape, float dropout_p, const RngKey& key);

}  // namespace nmt::cpu
