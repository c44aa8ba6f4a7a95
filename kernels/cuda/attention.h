// The CUDA unfused attention, probabilities kept (kernels/attention.h dispatches here with the same
// signatures), enqueued on the current stream (kernels/cuda/stream.h) without synchronising. The
// fused kernels are kernels/cuda/flash_attention/.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include "kernels/attention.h"
#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// q, out: [batch*q_len, heads*head_dim] T; k, v: [batch*kv_len, heads*head_dim] T;
// kv_lengths: [batch] i32 on the device (clamped to [0, kv_len]); probs: [batch, heads, q_len,
// kv_len] f32.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& kv_lengths,
                       Tensor& out, Tensor& probs, const AttentionShape& shape, float dropout_p,
                       const RngKey& key);
// d_out, dq like q; dk, dv like k; all T, written (=).
void attention_backward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& probs, const Tensor& kv_lengths, Tensor& dq, Tensor& dk,
                        Tensor& dv, const AttentionShape& shape, float dropout_p,
                        const RngKey& key);

}  // namespace nmt::cuda
