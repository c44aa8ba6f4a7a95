// Fused multi-head attention (flash-attention style): one pass per direction that never writes the
// [T, S] scores to memory, reading Q, K, V straight from a fused projection output.
//
// Semantics equal attention_forward / attention_backward (kernels/attention.h): scale 1/sqrt(dh),
// key s of sentence b masked when s >= kv_lengths[b], causal mask s <= t (top-left aligned, also
// when q_len != kv_len), a query whose every key is masked gives out 0 and zero gradients (never
// NaN), dropout on the probabilities with the shared Philox keying: prob (b, h, t, s) is kept when
// dropout_keep(key, ((b*heads + h)*q_len + t)*kv_len + s, p), so masks equal the CPU reference's,
// and backward regenerates them instead of storing them.
//
// Instead of the [batch, heads, T, S] probabilities, forward saves lse [batch, heads, T] f32: the
// log-sum-exp of the scaled, masked scores of each query (-inf for a query with no visible key).
// Backward recomputes the probabilities from q, k and lse. On CUDA it is deterministic without
// atomics: delta = rowsum(d_out * out), then one block per key tile sums dK, dV over the query
// tiles and one block per query tile sums dQ over the key tiles (recomputing P and dP a second
// time); when kv_len <= 64 one launch does all of it (see
// kernels/cuda/flash_attention/backward.cu).
//
// Backends: the CPU (f32, any head_dim) is the readable reference built on kernels/cpu/attention.h;
// CUDA (bf16 / f16, head_dim 64 or 128) runs the tiled tensor-core kernels of
// kernels/cuda/flash_attention*.cu. Incremental decoding (q_len 1 against a cache of kv_len keys)
// needs no separate path: the general kernels take q_len = 1 (one query tile, mostly empty rows,
// while the cost is the read of K and V, which any kernel must do).
//
// Layout: Q may be a column slice of a wider matrix, e.g. the [rows, 3 * heads * dh] output of the
// fused QKV projection. q is [batch * q_len, q_width] (any q_width >= q_col + heads * dh), head h
// of row b*q_len + t at columns [q_col + h*dh, q_col + (h+1)*dh); k, v likewise with kv_len rows
// per sentence. out is dense [batch * q_len, heads * dh].
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

// Q, K, V (or their gradients) as column slices: each tensor is [rows, width], the heads of the
// operand starting at column *_col. q, k, v may be the same tensor (one fused QKV buffer).
struct AttentionOperands {
  Tensor q, k, v;
  int64_t q_col = 0, k_col = 0, v_col = 0;
};

// Dropout's keep decisions saved by forward for backward: two i32 words of bits per query row
// and head (bit s % 32 of word s / 32 keeps key s), [batch * heads * q_len * 2] in lse's order.
// Only the CUDA short-sentence kernels use them (q_len and kv_len <= 64, head_dim 64, dropout on):
// there the backward read them instead of drawing every Philox number again, which cost it about a
// quarter of its time (docs/perf.md). The number of words:
int64_t fused_attention_keep_bits_words(const AttentionShape& shape);

// in:         q [batch*q_len, q_width], k/v [batch*kv_len, k_width / v_width], one float dtype
// kv_lengths: [batch] i32, each in [0, kv_len]
// out:        [batch*q_len, heads*head_dim] in the dtype of q, written (=)
// lse:        [batch, heads, q_len] f32, written (=), saved for backward
// keep_bits:  empty, or [fused_attention_keep_bits_words(shape)] i32 on q's device
// Returns true when it also stored the keep decisions in keep_bits (the kernel that reads them
// ran, with dropout); backward may then be given them.
bool fused_attention_forward(const AttentionOperands& in, const Tensor& kv_lengths, Tensor& out,
                             Tensor& lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key, const Tensor& keep_bits = Tensor());

// The q, k and v projections' bias gradients, for backward to add its gradients' column sums to.
struct AttentionBiasGrads {
  Tensor q, k, v;  // each empty (skipped) or [heads * head_dim] f32 on q's device, added to (+=)
};

// d_out, out: [batch*q_len, heads*head_dim] (out and lse from the forward with the same arguments).
// grads: dq, dk, dv shaped exactly like in.q, in.k, in.v with the same column offsets (grads.q_col
// must equal in.q_col, and so on), so one fused [rows, 3*heads*dh] buffer can take all three.
// Their heads' columns are written (=); other columns are left untouched. Deterministic: no
// atomics. keep_bits: empty (the keep decisions are drawn again), or what a forward with the same
// arguments stored and returned true for; the gradients are the same bits either way.
// bias_grads: see AttentionBiasGrads. Returns true when it added to each non-empty one the column
// sums of its gradient's heads over all rows (bias_grads.q[j] += Σ_row dq[row, q_col + j], j <
// heads*head_dim, over the batch*q_len rows; k and v likewise over the batch*kv_len rows), as
// linear_backward's db would. Only the CUDA short-sentence wgmma kernel does (q_len and kv_len
// <= 64, head_dim 64, 16-byte aligned rows, Hopper): it sums the gradient tiles it has staged for
// their stores, sparing the caller a second read of them, deterministically (fixed order, no
// atomics). Under an active PartialSumDeferral (kernels/cuda/reduce.h) with room, those sums are
// added at the deferral's flush, not by the time the op returns. Elsewhere (and when every one is
// empty) it returns false and leaves them untouched: the caller then sums the columns itself.
bool fused_attention_backward(const Tensor& d_out, const AttentionOperands& in, const Tensor& out,
                              const Tensor& lse, const Tensor& kv_lengths, AttentionOperands& grads,
                              const AttentionShape& shape, float dropout_p, const RngKey& key,
                              const Tensor& keep_bits = Tensor(),
                              const AttentionBiasGrads& bias_grads = {});

// Whether the fused op runs for these tensors: on the CPU f32 with any head_dim; on CUDA bf16 or
// f16 with head_dim 64 or 128. Callers fall back to attention_forward / attention_backward.
bool fused_attention_supported(Device device, DType dtype, int64_t head_dim);

}  // namespace nmt
