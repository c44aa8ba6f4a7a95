// EncoderLayer and DecoderLayer: blocks wrapped in residual/norm sublayers, in the order their
// parameters are registered (forward order; the flat layout is its reverse). The decoder layer
// runs whole sentences (forward, backward) or one position per row over a cache (step): the same
// sublayers and blocks either way.
#pragma once

#include <string>

#include "engine/model/attention_block.h"
#include "engine/model/feed_forward_block.h"
#include "engine/model/sublayer.h"

namespace nmt {

// Hands out a distinct dropout stream id to every dropout site of the graph.
struct DropoutIds {
  uint32_t next = 1;
  uint32_t take() { return next++; }
};

class EncoderLayer {
 public:
  EncoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
               DropoutIds& ids);
  // queued: the operands of those weight-gradient products get buffers of their own, so the
  // products may wait in the workspace's dw_queue (Sublayer::plan, AttentionBlock::plan,
  // FeedForwardBlock::plan). training: what only a backward reads is planned too.
  void plan(Arena& arena, int64_t max_rows, int64_t max_scores,
            QueuedGrads queued = QueuedGrads::none, bool training = true);
  // x: [batch*src_len, d_model]; src_lengths: [batch] i32. Returns the layer output view.
  // Pre-norm (ignored post-norm): `next` and `input_normed` as Sublayer::forward's, for the layer's
  // last and first sublayer.
  Tensor forward(const Tensor& x, const Tensor& src_lengths, int64_t batch, int64_t src_len,
                 const StepContext& ctx, const NormInto* next = nullptr, bool input_normed = false);
  // grad: [batch*src_len, d_model], gradient of the output in, of the input out (in place).
  // Pre-norm: `below` and `branch_ready` as Sublayer::backward's, for the first and last sublayer.
  void backward(Tensor& grad, Workspace& ws, const BranchTail* below = nullptr,
                bool branch_ready = false);
  // The first sublayer's LayerNorm (the layer below's `next`), the last sublayer's tail.
  NormInto input_norm(int64_t rows) const { return self_attn_sub_.input_norm(rows); }
  BranchTail output_tail() { return ffn_sub_.branch_tail(ffn_.output_bias_grad()); }
  const FeedForwardBlock& ffn() const { return ffn_; }

 private:
  AttentionBlock self_attn_;
  Sublayer self_attn_sub_;
  FeedForwardBlock ffn_;
  Sublayer ffn_sub_;
};

// What one decoder layer reads and writes while decoding one position per row.
struct DecoderLayerCache {
  CachedKeysValues self;   // blocks = rows, length = the batch's positions
  CachedKeysValues cross;  // blocks = sources, length = padded source length
};

class DecoderLayer {
 public:
  DecoderLayer(ParamStore& store, const std::string& prefix, const ModelShape& shape,
               DropoutIds& ids);
  // cross_kv_projected: the cross-attention's keys and values always come projected
  // (CrossKeysValues), so it plans no buffer for them. queued, training: as EncoderLayer::plan's.
  void plan(Arena& arena, int64_t max_rows, int64_t max_scores, bool cross_kv_projected,
            QueuedGrads queued = QueuedGrads::none, bool training = true);
  // y: [batch*tgt_len, d_model]; enc_out: [batch*src_len, d_model]. cross_kv: null, or the
  // cross-attention's keys and values already projected from enc_out (AttentionBlock::forward).
  Tensor forward(const Tensor& y, const Tensor& tgt_lengths, const Tensor& enc_out,
                 const Tensor& src_lengths, int64_t batch, int64_t tgt_len, int64_t src_len,
                 const StepContext& ctx, const NormInto* next = nullptr, bool input_normed = false,
                 const ProjectedKeysValues* cross_kv = nullptr);
  // grad: gradient of the output in, of the input out (in place); d_enc_out accumulated (+=),
  // unless forward's keys and values came projected (then their gradients go to cross_kv->d_kv).
  // `below`, `branch_ready`: as EncoderLayer::backward's.
  void backward(Tensor& grad, Tensor& d_enc_out, Workspace& ws, const BranchTail* below = nullptr,
                bool branch_ready = false);
  NormInto input_norm(int64_t rows) const { return self_attn_sub_.input_norm(rows); }
  BranchTail output_tail() { return ffn_sub_.branch_tail(ffn_.output_bias_grad()); }
  const FeedForwardBlock& ffn() const { return ffn_; }
  const AttentionBlock& cross_attention() const { return cross_attn_; }

  // Decoding (engine/decode/incremental_decoder.h drives it), dropout off. memory: [sources *
  // src_len, d_model] encoder output; cache.cross.keys/values [sources, src_len, d_model] written.
  void cache_source(const Tensor& memory, DecoderLayerCache& cache);
  // x: [rows, d_model], row r at positions[r] ([rows] i32 on the device); its keys and values join
  // cache.self. Returns the layer output view, [rows, d_model].
  Tensor step(const Tensor& x, const Tensor& positions, DecoderLayerCache& cache);

 private:
  // The three sublayers around the given attention paths (forward's or step's).
  Tensor run(const Tensor& y, const StepContext& ctx, const Sublayer::Forward& self_attention,
             const Sublayer::Forward& cross_attention, const NormInto* next = nullptr,
             bool input_normed = false);

  AttentionBlock self_attn_;
  Sublayer self_attn_sub_;
  AttentionBlock cross_attn_;
  Sublayer cross_attn_sub_;
  FeedForwardBlock ffn_;
  Sublayer ffn_sub_;
};

}  // namespace nmt
