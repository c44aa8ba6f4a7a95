// The CUDA implementations of the ops declared in kernels/*.h, one per public op with the same
// signature, so the dispatch in kernels/<op>.cpp is one line. Every op enqueues its work on the
// thread-local current stream (kernels/cuda/stream.h) and returns without synchronising, except
// cross_entropy_forward_backward and sum_of_squares, which return host values.
// Dtype contract (docs/cuda.md): activations and weights passed to an op are f32, bf16 or f16, all
// of one dtype per call; parameter gradients, saved statistics (mean, rstd, probs) and optimizer
// buffers are f32; every reduction accumulates in fp32 (or wider).
#pragma once

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/optimizer.h"
#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// --- layernorm.h -------------------------------------------------------------------------------
// x, y: [rows, d] T; gamma, beta: [d] T; mean, rstd: [rows] f32.
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps);
// dy, x, dx: [rows, d] T (dx may alias dy); gamma: [d] T; mean, rstd: [rows] f32;
// d_gamma, d_beta: [d] f32, accumulated (+=) deterministically.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta);

// --- cross_entropy.h ---------------------------------------------------------------------------
// logits: [rows, vocab] T; targets: [rows] i32; d_logits: [rows, vocab] T (may alias logits) or
// empty. Synchronises the current stream to return the sums; throws std::invalid_argument for a
// target outside [0, vocab) that is not pad_id.
LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits);

// --- embedding.h -------------------------------------------------------------------------------
// ids: [rows] i32; table: [vocab, d_model] T; out: [rows, d_model] T. An id outside [0, vocab) is
// treated like pad_id (a zero row) rather than read out of bounds: ids are checked on the host.
void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id);
// d_out: [rows, d_model] T; d_table: [vocab, d_model] f32, accumulated (+=) deterministically.
void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id);

// --- elementwise.h (all tensors of one call share the shape and a float dtype) ----------------
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx);
void residual_add(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
void fill_zero(Tensor& y);                            // any dtype
void copy_tensor(const Tensor& src, Tensor& dst);     // any dtype; either side may be on the host
void convert_tensor(const Tensor& src, Tensor& dst);  // float dtypes, both on the GPU
void dropout_forward(const Tensor& x, Tensor& y, float p, const RngKey& key);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, const RngKey& key);
// One pass each, bit-identical to the two ops they fuse (the 16-bit dropped-out value is rounded
// before the add, as dropout_forward's output was).
void dropout_residual_add(const Tensor& a, const Tensor& b, Tensor& y, float p, const RngKey& key);
void relu_dropout_backward(const Tensor& dy, const Tensor& y, Tensor& dx, float p);

// --- linear.h (cuBLASLt) -----------------------------------------------------------------------
// x: [rows, in] T; w: [out, in] T; b: [out] T or empty; y: [rows, out] T.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// y = max(x wᵀ + b, 0) in one cuBLASLt product (RELU_BIAS epilogue); shapes as linear_forward.
void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// dy: [rows, out] T; dx: [rows, in] T or empty; dw: [out, in] f32 (+=); db: [out] f32 (+=) or
// empty.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db);

// --- attention.h -------------------------------------------------------------------------------
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

// --- optimizer.h (clip_factor is host arithmetic and has no device version) --------------------
// x: any shape, f32, bf16 or f16. Synchronises the current stream to return the sum.
double sum_of_squares(const Tensor& x);
// param, grad, m, v: same shape, f32; one launch over the flat buffers. compute: nullptr or the
// working copy (same shape, f32/bf16/f16), written with the updated parameters in the same pass.
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 float grad_scale, Tensor* compute = nullptr);
// param, grad, m, v: [rows, cols] f32; rows whose gradient is all zeros are left untouched (and
// their working-copy rows too).
void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      float grad_scale, Tensor* compute = nullptr);

}  // namespace nmt::cuda
