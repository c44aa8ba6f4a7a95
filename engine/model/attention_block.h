// AttentionBlock: multi-head attention with its four projections (q_proj, k_proj, v_proj,
// out_proj), used as encoder self-attention, decoder causal self-attention and cross-attention.
#pragma once

#include <string>

#include "engine/model/arena.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"
#include "engine/model/workspace.h"
#include "kernels/attention.h"

namespace nmt {

class AttentionBlock {
 public:
  AttentionBlock(ParamStore& store, const std::string& prefix, const ModelShape& shape, bool causal,
                 uint32_t dropout_id);

  // Activation buffers for up to max_q_rows queries, max_kv_rows keys, and max_scores scores.
  void plan(Arena& arena, int64_t max_q_rows, int64_t max_kv_rows, int64_t max_scores);

  // xq: [batch*q_len, d_model]; xkv: [batch*kv_len, d_model]; kv_lengths: [batch] i32
  // out: [batch*q_len, d_model] written. xq and xkv must stay alive until backward.
  void forward(const Tensor& xq, const Tensor& xkv, const Tensor& kv_lengths, int64_t batch,
               int64_t q_len, int64_t kv_len, const StepContext& ctx, Tensor& out);

  // d_out: [batch*q_len, d_model]. d_xq written (=); d_xkv accumulated (+=). They may alias
  // (self-attention), in which case the result is the sum of all three paths.
  void backward(const Tensor& d_out, Tensor& d_xq, Tensor& d_xkv, Workspace& ws);

 private:
  ModelShape shape_;
  bool causal_;
  uint32_t dropout_id_;
  Param *q_w_, *q_b_, *k_w_, *k_b_, *v_w_, *v_b_, *o_w_, *o_b_;
  Buffer q_, k_, v_, ctx_;
  // Saved for backward: probs_ [batch, heads, q_len, kv_len] f32 (unfused), or lse_
  // [batch, heads, q_len] f32 when the fused kernel serves this dtype and head size (fused_).
  Buffer probs_, lse_;
  bool fused_ = false;
  // What forward saw, for backward.
  Tensor xq_, xkv_, kv_lengths_;
  AttentionShape att_;
  RngKey key_;
  float p_ = 0;
};

}  // namespace nmt
