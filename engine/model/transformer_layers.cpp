// EncoderLayer and DecoderLayer forward/backward, and the decoder layer's step.
#include "engine/model/transformer_layers.h"

namespace nmt {

EncoderLayer::EncoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, AttentionKind::encoder_self, ids.take()),
      self_attn_sub_(store, prefix + ".self_attn_layer_norm", shape, ids.take()),
      ffn_(store, prefix, shape, ids.take()),
      ffn_sub_(store, prefix + ".final_layer_norm", shape, ids.take()) {}

void EncoderLayer::plan(Arena& arena, int64_t max_rows, int64_t max_scores) {
  self_attn_.plan(arena, max_rows, max_rows, max_scores);
  self_attn_sub_.plan(arena, max_rows);
  ffn_.plan(arena, max_rows);
  ffn_sub_.plan(arena, max_rows);
}

Tensor EncoderLayer::forward(const Tensor& x, const Tensor& src_lengths, int64_t batch,
                             int64_t src_len, const StepContext& ctx) {
  Tensor h = self_attn_sub_.forward(x, ctx, [&](const Tensor& in, Tensor& out) {
    self_attn_.forward(in, in, src_lengths, batch, src_len, src_len, ctx, out);
  });
  return ffn_sub_.forward(h, ctx,
                          [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); });
}

// Each sublayer adds its block's output bias gradient while it writes the block's output gradient
// (Sublayer::backward), so the blocks do not add it.
void EncoderLayer::backward(Tensor& grad, Workspace& ws) {
  ffn_sub_.backward(
      grad, grad, ws, ffn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) { ffn_.backward(d_f, d_in, ws, how); });
  self_attn_sub_.backward(grad, grad, ws, self_attn_.output_bias_grad(),
                          [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
                            self_attn_.backward(d_f, d_in, d_in, ws, how);
                          });
}

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, AttentionKind::decoder_self, ids.take()),
      self_attn_sub_(store, prefix + ".self_attn_layer_norm", shape, ids.take()),
      cross_attn_(store, prefix + ".encoder_attn", shape, AttentionKind::cross, ids.take()),
      cross_attn_sub_(store, prefix + ".encoder_attn_layer_norm", shape, ids.take()),
      ffn_(store, prefix, shape, ids.take()),
      ffn_sub_(store, prefix + ".final_layer_norm", shape, ids.take()) {}

void DecoderLayer::plan(Arena& arena, int64_t max_rows, int64_t max_scores) {
  self_attn_.plan(arena, max_rows, max_rows, max_scores);
  self_attn_sub_.plan(arena, max_rows);
  cross_attn_.plan(arena, max_rows, max_rows, max_scores);
  cross_attn_sub_.plan(arena, max_rows);
  ffn_.plan(arena, max_rows);
  ffn_sub_.plan(arena, max_rows);
}

Tensor DecoderLayer::forward(const Tensor& y, const Tensor& tgt_lengths, const Tensor& enc_out,
                             const Tensor& src_lengths, int64_t batch, int64_t tgt_len,
                             int64_t src_len, const StepContext& ctx) {
  return run(
      y, ctx,
      [&](const Tensor& in, Tensor& out) {
        self_attn_.forward(in, in, tgt_lengths, batch, tgt_len, tgt_len, ctx, out);
      },
      [&](const Tensor& in, Tensor& out) {
        cross_attn_.forward(in, enc_out, src_lengths, batch, tgt_len, src_len, ctx, out);
      });
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
                         const Sublayer::Forward& cross_attention) {
  Tensor h = self_attn_sub_.forward(y, ctx, self_attention);
  h = cross_attn_sub_.forward(h, ctx, cross_attention);
  return ffn_sub_.forward(h, ctx,
                          [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); });
}

// As EncoderLayer::backward: the sublayers add the blocks' output bias gradients.
void DecoderLayer::backward(Tensor& grad, Tensor& d_enc_out, Workspace& ws) {
  ffn_sub_.backward(
      grad, grad, ws, ffn_.output_bias_grad(),
      [&](const Tensor& d_f, Tensor& d_in, DxWrite how) { ffn_.backward(d_f, d_in, ws, how); });
  cross_attn_sub_.backward(grad, grad, ws, cross_attn_.output_bias_grad(),
                           [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
                             cross_attn_.backward(d_f, d_in, d_enc_out, ws, how);
                           });
  self_attn_sub_.backward(grad, grad, ws, self_attn_.output_bias_grad(),
                          [&](const Tensor& d_f, Tensor& d_in, DxWrite how) {
                            self_attn_.backward(d_f, d_in, d_in, ws, how);
                          });
}

}  // namespace nmt
