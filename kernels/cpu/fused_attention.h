// CPU reference of the fused attention (kernels/fused_attention.h): the unfused reference
// (kernels/cpu/attention.h) on dense copies of the strided operands, plus the log-sum-exp that
// forward saves and from which backward recomputes the probabilities.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace nmt::cpu {

// Head h of row r of an operand is data[r * stride + h * head_dim ...] (data already offset by
// the operand's first column).
struct HeadColumns {
  const float* data;
  int64_t stride;
};
struct MutableHeadColumns {
  float* data;
  int64_t stride;
};

// q: [batch * T] rows, k, v: [batch * S] rows; kv_lengths: [batch] in [0, S] (else
// std::invalid_argument); out: [batch * T, heads * head_dim] dense, lse: [batch, heads, T], both
// written (=).
void fused_attention_forward(HeadColumns q, HeadColumns k, HeadColumns v, const int32_t* kv_lengths,
                             float* out, float* lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key);

// d_out: [batch * T, heads * head_dim] dense; lse from forward; dq, dk, dv: the heads' columns of
// rows like q, k, v, written (=).
void fused_attention_backward(const float* d_out, HeadColumns q, HeadColumns k, HeadColumns v,
                              const float* lse, const int32_t* kv_lengths, MutableHeadColumns dq,
                              MutableHeadColumns dk, MutableHeadColumns dv,
                              const AttentionShape& shape, float dropout_p, const RngKey& key);

}  // namespace nmt::cpu
