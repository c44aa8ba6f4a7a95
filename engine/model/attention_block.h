// AttentionBlock: multi-head attention with its four projections (q_proj, k_proj, v_proj,
// out_proj), used as encoder self-attention, decoder causal self-attention and cross-attention;
// in training over whole sentences (forward, backward), in decoding one position at a time over
// cached keys and values (attend_cached, append_and_attend).
//
// Self-attention's q, k and v weights are always laid out as one [3d, d] matrix (ParamStore::join),
// cross-attention's k and v as one [2d, d]. Where the fused attention kernels run (CUDA bf16/f16;
// kernels/fused_attention.h), training projects with one GEMM per input through them: one
// [rows, 3d] output that the fused kernels read column by column (k | v for cross-attention).
// Backward is one GEMM per input as well, so the three input-gradient paths are summed inside it
// instead of by separate adds. Where the fused backward sums the q, k, v bias gradients itself
// (CUDA, short sentences: from the gradient tiles it stages), those GEMMs skip the column sums.
// Cross-attention may also be handed its keys and values projected already (ProjectedKeysValues:
// CrossKeysValues projects every decoder layer's at once); it then projects only its queries, and
// its backward leaves the key and value products to the caller.
#pragma once

#include <string>

#include "engine/model/arena.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/workspace.h"
#include "kernels/attention.h"
#include "kernels/fused_attention.h"
#include "kernels/linear.h"

namespace nmt {

// Keys and values kept between decoding steps, in blocks of `length` positions: one block per
// hypothesis (self-attention, one query each) or per source (cross-attention, the source's beam
// rows as its queries). Views into memory the decoder state owns (engine/decode/).
struct CachedKeysValues {
  Tensor keys, values;  // [blocks, length, d_model] compute dtype
  Tensor lengths;       // [blocks] i32: positions of each block the queries see
  Tensor probs;         // [blocks, heads, queries per block, length] f32 scratch
};

// Cross-attention keys and values projected outside the block (CrossKeysValues projects every
// decoder layer's with one GEMM): this layer's k | v are columns [k_col, k_col + 2 * d_model) of
// kv, and backward writes their gradients into the same columns of d_kv.
struct ProjectedKeysValues {
  Tensor kv;    // [batch*kv_len, width] compute dtype, read; width >= k_col + 2 * d_model
  Tensor d_kv;  // [batch*kv_len, width] compute dtype, this layer's columns written (=)
  int64_t k_col = 0;
};

// Whether attention blocks of this shape on `device` take the fused path (joined projections,
// kernels/fused_attention.h): CUDA where its kernels serve the dtype and head size, the CPU when
// shape.cpu_fused_attention asks for its f32 reference.
bool attention_runs_fused(const ModelShape& shape, Device device);

// The floats of partial sums one attention backward's q, k, v bias gradients take for `sentences`
// sentences where the short-sentence CUDA kernels sum them (16-bit dtypes, head_dim 64; kernels/
// fused_attention.h), so that a model can plan room for them in its PartialSumDeferral; 0 where
// they do not (the CPU, f32, other head sizes, NMT_ATTENTION_BIAS_SUMS=0).
int64_t attention_bias_partial_floats(const ModelShape& shape, Device device, int64_t sentences);

enum class AttentionKind : uint8_t {
  encoder_self,  // queries and keys from one input, every key visible
  decoder_self,  // queries and keys from one input, causal
  cross,         // queries from the decoder, keys and values from the encoder output
};

class AttentionBlock {
 public:
  AttentionBlock(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                 AttentionKind kind, uint32_t dropout_id);

  // Activation buffers for up to max_q_rows queries, max_kv_rows keys (0 where the keys and
  // values always come projected: ProjectedKeysValues), and max_scores scores.
  // queued: from QueuedGrads::attention, cross-attention keeps its q projection's gradient in a
  // buffer of its own, so that q's weight-gradient product can wait in the workspace's dw_queue
  // (the out projection's d_out comes from the sublayer's own slot: Sublayer::plan); with all,
  // fused self-attention keeps its joined q | k | v gradient too.
  void plan(Arena& arena, int64_t max_q_rows, int64_t max_kv_rows, int64_t max_scores,
            QueuedGrads queued = QueuedGrads::none);

  // xq: [batch*q_len, d_model]; xkv: [batch*kv_len, d_model] (the same tensor as xq for
  // self-attention); kv_lengths: [batch] i32
  // out: [batch*q_len, d_model] written. xq and xkv must stay alive until backward.
  // projected: null, or (cross-attention on the fused path) its keys and values already
  // projected from xkv; the block then reads xkv no more, in forward or backward.
  void forward(const Tensor& xq, const Tensor& xkv, const Tensor& kv_lengths, int64_t batch,
               int64_t q_len, int64_t kv_len, const StepContext& ctx, Tensor& out,
               const ProjectedKeysValues* projected = nullptr);

  // d_out: [batch*q_len, d_model]. d_xq written (=) or added to (+=) as d_xq_write says; d_xkv
  // accumulated (+=). For self-attention they must alias, and the sum of all three paths is
  // written or added as d_xq_write says. out_proj's bias gradient is not added here: the
  // sublayer adds d_out's column sums into output_bias_grad() while writing d_out.
  // Where ws.dw_queue is on, the weight-gradient products whose operands outlive this layer's
  // backward (out_proj's when d_out is not in a shared workspace slot; cross-attention's q and
  // fused self-attention's q | k | v with their own gradient buffers) are queued there instead of
  // run: the weight gradients are then complete only after the queue's flush. After a forward with
  // projected keys and values, d_xkv is left alone: the gradients of the projections go to
  // projected->d_kv instead, and their products (d_xkv, the k and v weight gradients, their bias
  // gradients unless backward_summed_biases()) are the caller's.
  void backward(const Tensor& d_out, Tensor& d_xq, Tensor& d_xkv, Workspace& ws,
                DxWrite d_xq_write);
  // out_proj's bias gradient, [d_model] f32, for the sublayer that writes d_out to add into.
  Tensor& output_bias_grad() { return o_b_->grad; }
  // Whether the last backward's fused attention added the q, k, v bias gradients itself.
  bool backward_summed_biases() const { return biases_summed_; }
  // The joined input projections: q | k | v (self-attention) or k | v (cross-attention),
  // [3d or 2d, d_model] and [3d or 2d].
  const ParamGroup* joined_weights() const { return in_w_; }
  const ParamGroup* joined_biases() const { return in_b_; }

  // Decoding, no dropout, the projections of forward. xkv: [rows, d_model]; k, v: [rows,
  // d_model] written: the keys and values forward computes from xkv (a source's, for its cache).
  void project_keys_values(const Tensor& xkv, Tensor& k, Tensor& v);
  // xq: [rows, d_model], rows a multiple of kv's blocks (consecutive rows share a block); out:
  // [rows, d_model] written. Attends over each block's first kv.lengths positions.
  void attend_cached(const Tensor& xq, CachedKeysValues& kv, Tensor& out);
  // Self-attention: xq's own keys and values are written at each row's position of its block
  // (kv.keys/values[r, positions[r]], positions: [rows] i32 on the device) first, then
  // attend_cached (kv.lengths = positions + 1).
  void append_and_attend(const Tensor& xq, const Tensor& positions, CachedKeysValues& kv,
                         Tensor& out);

 private:
  bool self_attention() const { return kind_ != AttentionKind::cross; }
  // The q, k and v projections of q_rows queries and kv_rows keys, carved from `buffer` (forward's
  // outputs, or backward's gradients of them): joined, one [rows, 3d] matrix (self-attention) or
  // q [q_rows, d] and one [kv_rows, 2d] matrix (cross-attention), as the joined GEMMs write them;
  // else three dense matrices.
  AttentionOperands projections(const Buffer& buffer, int64_t q_rows, int64_t kv_rows,
                                bool joined) const;
  // The same with the keys and values projected outside: q [q_rows, d] carved from `buffer`, k | v
  // the columns of kv_all (projected_.kv in forward, projected_.d_kv in backward).
  AttentionOperands with_projected(const Buffer& buffer, const Tensor& kv_all,
                                   int64_t q_rows) const;
  // Forward's projections of xq and xkv into p (laid out by projections(.., fused_)).
  void project(const Tensor& xq, const Tensor& xkv, AttentionOperands& p);
  // Backward's: the gradients `grads` of the projections back to d_xq (= or +=, d_xq_write) and
  // d_xkv (+=); the q, k, v bias gradients too unless biases_summed (the fused backward added
  // them already). out_dw: null, or the output projection's weight-gradient product, left for
  // here by backward so that it and q's (both d x d over the query rows) go out as one batched
  // launch (cross-attention; linear_weight_grads).
  // q_queue: where q's weight-gradient product waits instead (null: run here); for fused
  // self-attention, the joined q | k | v product's.
  void project_backward(AttentionOperands& grads, Tensor& d_xq, Tensor& d_xkv, DxWrite d_xq_write,
                        bool biases_summed, const WeightGradProduct* out_dw,
                        WeightGradQueue* q_queue);

  ModelShape shape_;
  AttentionKind kind_;
  uint32_t dropout_id_;
  Param *q_w_, *q_b_, *k_w_, *k_b_, *v_w_, *v_b_, *o_w_, *o_b_;
  // The joined projections: q, k, v (self-attention) or k, v (cross-attention).
  const ParamGroup *in_w_, *in_b_;
  Buffer proj_;  // [max_q_rows * d + 2 * max_kv_rows * d]: forward's projections
  Buffer ctx_;
  Buffer dq_;    // [max_q_rows, d]: cross-attention's q gradient, where planned (queued)
  Buffer dqkv_;  // [max_q_rows, 3d]: fused self-attention's q | k | v gradient, where planned
  // Saved for backward: probs_ [batch, heads, q_len, kv_len] f32 (unfused), or lse_
  // [batch, heads, q_len] f32 when the fused kernel serves this dtype and head size (fused_; then
  // training also projects through the joined in_w_ / in_b_).
  Buffer probs_, lse_;
  bool fused_ = false;
  // The dropout keep bits the CUDA forward stores for backward ([batch * heads * q_len * 2] i32,
  // kernels/fused_attention.h), planned when attention dropout is on; kept_bits_: this forward
  // stored them.
  Buffer keep_bits_;
  bool kept_bits_ = false;
  // What forward saw, for backward.
  Tensor xq_, xkv_, kv_lengths_;
  bool kv_projected_ = false;
  ProjectedKeysValues projected_;
  bool biases_summed_ = false;  // what the last backward's fused attention did
  AttentionShape att_;
  RngKey key_;
  float p_ = 0;
};

}  // namespace nmt
