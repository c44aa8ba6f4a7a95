// EncoderLayer and DecoderLayer forward/backward, and the decoder layer's step.
#include "engine/model/transformer_layers.h"

namespace nmt {

EncoderLayer::EncoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, AttentionKind::encoder_self, ids.take()),
      self_attn_sub_(store, prefix + ".self_attn_layer_norm", shape, ids.take()),
      ffn_(store, prefix, shape, ids.take()),
      ffn_sub_(store, prefix + ".final_layer_norm", shape, ids.take()) {}

void EncoderLayer::plan(Arena& arena, int64_t max_rows, int64_t max_scores, QueuedGrads queued,
                        bool training) {
  const bool attention = queued != QueuedGrads::none, all = queued == QueuedGrads::all;
  self_attn_.plan(arena, max_rows, max_rows, max_scores, queued);
  self_attn_sub_.plan(arena, max_rows, attention);
  ffn_.plan(arena, max_rows, all, training);
  ffn_sub_.plan(arena, max_rows, all);
}

// Pre-norm: each sublayer computes the next one's LayerNorm in its residual pass (Sublayer).
Tensor EncoderLayer::forward(const Tensor& x, const Tensor& src_lengths, int64_t batch,
                             int64_t src_len, const StepContext& ctx, const NormInto* next,
                             bool input_normed) {
  const NormInto ffn_norm = ffn_sub_.input_norm(x.dim(0));
  Tensor h = self_attn_sub_.forward(
      x, ctx,
      [&](const Tensor& in, Tensor& out) {
        self_attn_.forward(in, in, src_lengths, batch, src_len, src_len, ctx, out);
      },
      &ffn_norm, input_normed);
  return ffn_sub_.forward(
      h, ctx, [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); }, next, true);
}

// Each sublayer adds its block's output bias gradient while it writes the block's output gradient
// (Sublayer::backward), so the blocks do not add it. Pre-norm: each sublayer writes the branch
// gradient of the one below in its last pass.
void EncoderLayer::backward(Tensor& grad, Workspace& ws, const BranchTail* below,
                            bool branch_ready) {
  const BranchTail self_attn_tail = self_attn_sub_.branch_tail(self_attn_.output_bias_grad());
  ffn_sub_.backward(
      grad, grad, ws, ffn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) { ffn_.backward(d_f, d_in, ws, how); },
      &self_attn_tail, branch_ready);
  self_attn_sub_.backward(
      grad, grad, ws, self_attn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
        self_attn_.backward(d_f, d_in, d_in, ws, how);
      },
      below, true);
}

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, AttentionKind::decoder_self, ids.take()),
      self_attn_sub_(store, prefix + ".self_attn_layer_norm", shape, ids.take()),
      cross_attn_(store, prefix + ".encoder_attn", shape, AttentionKind::cross, ids.take()),
      cross_attn_sub_(store, prefix + ".encoder_attn_layer_norm", shape, ids.take()),
      ffn_(store, prefix, shape, ids.take()),
      ffn_sub_(store, prefix + ".final_layer_norm", shape, ids.take()) {}

void DecoderLayer::plan(Arena& arena, int64_t max_rows, int64_t max_scores, bool cross_kv_projected,
                        QueuedGrads queued, bool training) {
  const bool attention = queued != QueuedGrads::none, all = queued == QueuedGrads::all;
  self_attn_.plan(arena, max_rows, max_rows, max_scores, queued);
  self_attn_sub_.plan(arena, max_rows, attention);
  cross_attn_.plan(arena, max_rows, cross_kv_projected ? 0 : max_rows, max_scores, queued);
  cross_attn_sub_.plan(arena, max_rows, attention);
  ffn_.plan(arena, max_rows, all, training);
  ffn_sub_.plan(arena, max_rows, all);
}

Tensor DecoderLayer::forward(const Tensor& y, const Tensor& tgt_lengths, const Tensor& enc_out,
                             const Tensor& src_lengths, int64_t batch, int64_t tgt_len,
                             int64_t src_len, const StepContext& ctx, const NormInto* next,
                             bool input_normed, const ProjectedKeysValues* cross_kv) {
  return run(
      y, ctx,
      [&](const Tensor& in, Tensor& out) {
        self_attn_.forward(in, in, tgt_lengths, batch, tgt_len, tgt_len, ctx, out);
      },
      [&](const Tensor& in, Tensor& out) {
        cross_attn_.forward(in, enc_out, src_lengths, batch, tgt_len, src_len, ctx, out, cross_kv);
      },
      next, input_normed);
}

void DecoderLayer::cache_source(const Tensor& memory, DecoderLayerCache& cache) {
  const int64_t rows = memory.dim(0), d = memory.dim(1);
  Tensor k = cache.cross.keys.reshaped({rows, d}), v = cache.cross.values.reshaped({rows, d});
  cross_attn_.project_keys_values(memory, k, v);
}

Tensor DecoderLayer::step(const Tensor& x, const Tensor& positions, DecoderLayerCache& cache) {
  StepContext decoding;
  decoding.training = false;
  return run(
      x, decoding,
      [&](const Tensor& in, Tensor& out) {
        self_attn_.append_and_attend(in, positions, cache.self, out);
      },
      [&](const Tensor& in, Tensor& out) { cross_attn_.attend_cached(in, cache.cross, out); });
}

Tensor DecoderLayer::run(const Tensor& y, const StepContext& ctx,
                         const Sublayer::Forward& self_attention,
                         const Sublayer::Forward& cross_attention, const NormInto* next,
                         bool input_normed) {
  const int64_t rows = y.dim(0);
  const NormInto cross_norm = cross_attn_sub_.input_norm(rows);
  const NormInto ffn_norm = ffn_sub_.input_norm(rows);
  Tensor h = self_attn_sub_.forward(y, ctx, self_attention, &cross_norm, input_normed);
  h = cross_attn_sub_.forward(h, ctx, cross_attention, &ffn_norm, true);
  return ffn_sub_.forward(
      h, ctx, [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); }, next, true);
}

// As EncoderLayer::backward: the sublayers add the blocks' output bias gradients, and pre-norm
// writes each branch gradient in the pass of the sublayer above.
void DecoderLayer::backward(Tensor& grad, Tensor& d_enc_out, Workspace& ws, const BranchTail* below,
                            bool branch_ready) {
  const BranchTail cross_attn_tail = cross_attn_sub_.branch_tail(cross_attn_.output_bias_grad());
  const BranchTail self_attn_tail = self_attn_sub_.branch_tail(self_attn_.output_bias_grad());
  ffn_sub_.backward(
      grad, grad, ws, ffn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) { ffn_.backward(d_f, d_in, ws, how); },
      &cross_attn_tail, branch_ready);
  cross_attn_sub_.backward(
      grad, grad, ws, cross_attn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
        cross_attn_.backward(d_f, d_in, d_enc_out, ws, how);
      },
      &self_attn_tail, true);
  self_attn_sub_.backward(
      grad, grad, ws, self_attn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
        self_attn_.backward(d_f, d_in, d_in, ws, how);
      },
      below, true);
}

}  // namespace nmt
