// EncoderLayer and DecoderLayer forward/backward.
#include "engine/model/transformer_layers.h"

namespace nmt {

EncoderLayer::EncoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, /*causal=*/false, ids.take()),
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
  return ffn_sub_.forward(h, ctx, [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); });
}

void EncoderLayer::backward(Tensor& grad, Workspace& ws) {
  ffn_sub_.backward(grad, grad, ws,
                    [&](const Tensor& d_f, Tensor& d_in) { ffn_.backward(d_f, d_in, ws); });
  self_attn_sub_.backward(grad, grad, ws, [&](const Tensor& d_f, Tensor& d_in) {
    self_attn_.backward(d_f, d_in, d_in, ws);
  });
}

DecoderLayer::DecoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
                           DropoutIds& ids)
    : self_attn_(store, prefix + ".self_attn", shape, /*causal=*/true, ids.take()),
      self_attn_sub_(store, prefix + ".self_attn_layer_norm", shape, ids.take()),
      cross_attn_(store, prefix + ".encoder_attn", shape, /*causal=*/false, ids.take()),
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
  Tensor h = self_attn_sub_.forward(y, ctx, [&](const Tensor& in, Tensor& out) {
    self_attn_.forward(in, in, tgt_lengths, batch, tgt_len, tgt_len, ctx, out);
  });
  h = cross_attn_sub_.forward(h, ctx, [&](const Tensor& in, Tensor& out) {
    cross_attn_.forward(in, enc_out, src_lengths, batch, tgt_len, src_len, ctx, out);
  });
  return ffn_sub_.forward(h, ctx, [&](const Tensor& in, Tensor& out) { ffn_.forward(in, ctx, out); });
}

void DecoderLayer::backward(Tensor& grad, Tensor& d_enc_out, Workspace& ws) {
  ffn_sub_.backward(grad, grad, ws,
                    [&](const Tensor& d_f, Tensor& d_in) { ffn_.backward(d_f, d_in, ws); });
  cross_attn_sub_.backward(grad, grad, ws, [&](const Tensor& d_f, Tensor& d_in) {
    cross_attn_.backward(d_f, d_in, d_enc_out, ws);
  });
  self_attn_sub_.backward(grad, grad, ws, [&](const Tensor& d_f, Tensor& d_in) {
    self_attn_.backward(d_f, d_in, d_in, ws);
  });
}

}  // namespace nmt
