// CUDA side of the fused attention (kernels/fused_attention.h): tiled tensor-core kernels for
// bf16 / f16 with head_dim 64 or 128 (kernels/cuda/flash_attention/*.cu). Arguments are checked
// by the dispatch in kernels/fused_attention.cpp; these check only what the kernels assume.
#pragma once

#include <cstdint>

#include "kernels/fused_attention.h"

namespace nmt::cuda {

// Same contracts as nmt::fused_attention_forward / _backward; work goes on the current stream.
// keep_bits (empty, or checked by the dispatch): the short-sentence wgmma kernels (head_dim 64)
// store the dropout keep decisions there in forward and read them in backward. bias_grads (checked
// by the dispatch): the short-sentence wgmma backward adds the gradients' column sums into them
// (at an active PartialSumDeferral's flush where it has room, kernels/cuda/reduce.h).
bool fused_attention_forward(const AttentionOperands& in, const Tensor& kv_lengths, Tensor& out,
                             Tensor& lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key, const Tensor& keep_bits);
bool fused_attention_backward(const Tensor& d_out, const AttentionOperands& in, const Tensor& out,
                              const Tensor& lse, const Tensor& kv_lengths, AttentionOperands& grads,
                              const AttentionShape& shape, float dropout_p, const RngKey& key,
                              const Tensor& keep_bits, const AttentionBiasGrads& bias_grads);

// bf16 or f16 with head_dim 64 or 128.
bool fused_attention_supported(DType dtype, int64_t head_dim);

// Whether the short-sentence wgmma kernels put several sentences in one item where q_len and kv_len
// are at most 32 (kernels/cuda/flash_attention/short_pack.cuh); on by default. NMT_ATTENTION_PACK=0
// in the environment, or set_attention_pack(false), gives each (sentence, head) its own item (to
// time the two, and for the tests).
void set_attention_pack(bool on);
bool attention_pack();

}  // namespace nmt::cuda
