// AttentionBlock forward and backward, written out projection by projection, and its decoding
// steps over cached keys and values.
#include "engine/model/attention_block.h"

#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/fused_attention.h"
#include "kernels/linear.h"

namespace nmt {

AttentionBlock::AttentionBlock(ParamStore& store, const std::string& prefix,
                               const ModelShape& shape, bool causal, uint32_t dropout_id)
    : shape_(shape), causal_(causal), dropout_id_(dropout_id) {
  int64_t d = shape.d_model;
  auto linear = [&](const char* name, Param*& w, Param*& b) {
    w = store.add(prefix + "." + name + ".weight", {d, d}, ParamKind::weight);
    b = store.add(prefix + "." + name + ".bias", {d}, ParamKind::bias);
  };
  linear("q_proj", q_w_, q_b_);
  linear("k_proj", k_w_, k_b_);
  linear("v_proj", v_w_, v_b_);
  linear("out_proj", o_w_, o_b_);
}

void AttentionBlock::plan(Arena& arena, int64_t max_q_rows, int64_t max_kv_rows,
                          int64_t max_scores) {
  int64_t d = shape_.d_model;
  q_ = arena.allocate("attn.q", shape_.compute_dtype, max_q_rows * d);
  k_ = arena.allocate("attn.k", shape_.compute_dtype, max_kv_rows * d);
  v_ = arena.allocate("attn.v", shape_.compute_dtype, max_kv_rows * d);
  ctx_ = arena.allocate("attn.ctx", shape_.compute_dtype, max_q_rows * d);
  // The fused kernel keeps one log-sum-exp per query and head instead of every probability.
  fused_ = arena.device() == Device::cuda &&
           fused_attention_supported(Device::cuda, shape_.compute_dtype, d / shape_.heads);
  if (fused_)
    lse_ = arena.allocate("attn.lse", DType::f32, max_q_rows * shape_.heads);
  else
    probs_ = arena.allocate("attn.probs", DType::f32, max_scores);
}

void AttentionBlock::forward(const Tensor& xq, const Tensor& xkv, const Tensor& kv_lengths,
                             int64_t batch, int64_t q_len, int64_t kv_len, const StepContext& ctx,
                             Tensor& out) {
  int64_t d = shape_.d_model, q_rows = batch * q_len, kv_rows = batch * kv_len;
  xq_ = xq;
  xkv_ = xkv;
  kv_lengths_ = kv_lengths;
  att_ = AttentionShape{batch, q_len, kv_len, shape_.heads, d / shape_.heads, causal_};
  key_ = RngKey{ctx.seed, ctx.step, dropout_id_};
  p_ = ctx.training ? shape_.attention_dropout : 0.0f;

  Tensor q = q_.view({q_rows, d}), k = k_.view({kv_rows, d}), v = v_.view({kv_rows, d});
  Tensor c = ctx_.view({q_rows, d});
  linear_forward(xq, q_w_->compute, q_b_->compute, q);
  project_keys_values(xkv, k, v);
  if (fused_) {
    Tensor lse = lse_.view({batch, shape_.heads, q_len});
    fused_attention_forward(AttentionOperands{q, k, v}, kv_lengths, c, lse, att_, p_, key_);
  } else {
    Tensor probs = probs_.view({batch, shape_.heads, q_len, kv_len});
    attention_forward(q, k, v, kv_lengths, c, probs, att_, p_, key_);
  }
  linear_forward(c, o_w_->compute, o_b_->compute, out);
}

void AttentionBlock::project_keys_values(const Tensor& xkv, Tensor& k, Tensor& v) {
  linear_forward(xkv, k_w_->compute, k_b_->compute, k);
  linear_forward(xkv, v_w_->compute, v_b_->compute, v);
}

void AttentionBlock::attend_cached(const Tensor& xq, CachedKeysValues& kv, Tensor& out) {
  const int64_t d = shape_.d_model, rows = xq.dim(0);
  const int64_t blocks = kv.keys.dim(0), length = kv.keys.dim(1);
  Tensor q = q_.view({rows, d}), c = ctx_.view({rows, d});
  linear_forward(xq, q_w_->compute, q_b_->compute, q);
  // The unfused kernel at every dtype (decoding has always run it; kv.probs is its scratch). The
  // lengths mask each block's positions beyond those decoded so far, or its source's padding.
  AttentionShape shape{blocks, rows / blocks, length, shape_.heads, d / shape_.heads, false};
  attention_forward(q, kv.keys.reshaped({blocks * length, d}),
                    kv.values.reshaped({blocks * length, d}), kv.lengths, c, kv.probs, shape, 0.0f,
                    RngKey{});
  linear_forward(c, o_w_->compute, o_b_->compute, out);
}

void AttentionBlock::append_and_attend(const Tensor& xq, const Tensor& positions,
                                       CachedKeysValues& kv, Tensor& out) {
  const int64_t d = shape_.d_model, rows = xq.dim(0);
  Tensor k = k_.view({rows, d}), v = v_.view({rows, d});
  project_keys_values(xq, k, v);
  cache_write_position(k, positions, kv.keys);
  cache_write_position(v, positions, kv.values);
  attend_cached(xq, kv, out);
}

void AttentionBlock::backward(const Tensor& d_out, Tensor& d_xq, Tensor& d_xkv, Workspace& ws) {
  int64_t d = shape_.d_model;
  int64_t q_rows = att_.batch * att_.q_len, kv_rows = att_.batch * att_.kv_len;
  Tensor q = q_.view({q_rows, d}), k = k_.view({kv_rows, d}), v = v_.view({kv_rows, d});
  Tensor c = ctx_.view({q_rows, d});
  Tensor d_ctx = ws.a1.view({q_rows, d});
  Tensor dq = ws.a2.view({q_rows, d}), dk = ws.a3.view({kv_rows, d}), dv = ws.a4.view({kv_rows, d});

  linear_backward(d_out, c, o_w_->compute, d_ctx, o_w_->grad, o_b_->grad);
  if (fused_) {
    Tensor lse = lse_.view({att_.batch, att_.heads, att_.q_len});
    AttentionOperands grads{dq, dk, dv};
    fused_attention_backward(d_ctx, AttentionOperands{q, k, v}, c, lse, kv_lengths_, grads, att_,
                             p_, key_);
  } else {
    Tensor probs = probs_.view({att_.batch, att_.heads, att_.q_len, att_.kv_len});
    attention_backward(d_ctx, q, k, v, probs, kv_lengths_, dq, dk, dv, att_, p_, key_);
  }
  // d_xq first (=), then the key and value paths (+=): correct also when d_xq aliases d_xkv.
  linear_backward(dq, xq_, q_w_->compute, d_xq, q_w_->grad, q_b_->grad);
  Tensor tmp = ws.a1.view({kv_rows, d});  // d_ctx is consumed
  linear_backward(dk, xkv_, k_w_->compute, tmp, k_w_->grad, k_b_->grad);
  add_inplace(d_xkv, tmp);
  linear_backward(dv, xkv_, v_w_->compute, tmp, v_w_->grad, v_b_->grad);
  add_inplace(d_xkv, tmp);
}

}  // namespace nmt
