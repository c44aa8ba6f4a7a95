// AttentionBlock forward and backward, projection by projection (or joined, on the fused path),
// and its decoding steps over cached keys and values.
#include "engine/model/attention_block.h"

#include <stdexcept>

#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/env_switch.h"
#include "kernels/fused_attention.h"
#include "kernels/linear.h"
#include "kernels/op_checks.h"

namespace nmt {
namespace {

// NMT_ATTENTION_KEEP_BITS=0 draws the attention dropout mask again in backward (for A/B timing;
// the gradients are the same bits either way).
EnvSwitch keep_bits_switch("NMT_ATTENTION_KEEP_BITS", /*default_on=*/true);
// NMT_ATTENTION_BIAS_SUMS=0 leaves the q, k, v bias gradients to linear_backward's column sums
// rather than the attention backward's (for A/B timing; the sums' order differs, so the bits do).
EnvSwitch bias_sums_switch("NMT_ATTENTION_BIAS_SUMS", /*default_on=*/true);
// NMT_BATCH_WEIGHT_GRADS=0 runs cross-attention's out and q weight gradients as two products
// instead of one batched launch (for A/B timing; the sums' order differs, so the bits do).
EnvSwitch batch_weight_grads_switch("NMT_BATCH_WEIGHT_GRADS", /*default_on=*/true);

}  // namespace

bool attention_runs_fused(const ModelShape& shape, Device device) {
  return (device == Device::cuda || shape.cpu_fused_attention) &&
         fused_attention_supported(device, shape.compute_dtype, shape.d_model / shape.heads);
}

int64_t attention_bias_partial_floats(const ModelShape& shape, Device device, int64_t sentences) {
  const bool half = shape.compute_dtype == DType::bf16 || shape.compute_dtype == DType::f16;
  if (device != Device::cuda || !half || shape.d_model != 64 * shape.heads ||
      !attention_runs_fused(shape, device) || !bias_sums_switch.get())
    return 0;
  return sentences * 3 * shape.d_model;
}

AttentionBlock::AttentionBlock(ParamStore& store, const std::string& prefix,
                               const ModelShape& shape, AttentionKind kind, uint32_t dropout_id)
    : shape_(shape), kind_(kind), dropout_id_(dropout_id) {
  int64_t d = shape.d_model;
  auto linear = [&](const char* name, Param*& w, Param*& b) {
    w = store.add(prefix + "." + name + ".weight", {d, d}, ParamKind::weight);
    b = store.add(prefix + "." + name + ".bias", {d}, ParamKind::bias);
  };
  linear("q_proj", q_w_, q_b_);
  linear("k_proj", k_w_, k_b_);
  linear("v_proj", v_w_, v_b_);
  linear("out_proj", o_w_, o_b_);
  if (self_attention()) {
    in_w_ = store.join({q_w_, k_w_, v_w_});
    in_b_ = store.join({q_b_, k_b_, v_b_});
  } else {
    in_w_ = store.join({k_w_, v_w_});
    in_b_ = store.join({k_b_, v_b_});
  }
}

void AttentionBlock::plan(Arena& arena, int64_t max_q_rows, int64_t max_kv_rows, int64_t max_scores,
                          QueuedGrads queued) {
  int64_t d = shape_.d_model;
  proj_ = arena.allocate("attn.proj", shape_.compute_dtype, (max_q_rows + 2 * max_kv_rows) * d);
  ctx_ = arena.allocate("attn.ctx", shape_.compute_dtype, max_q_rows * d);
  if (queued != QueuedGrads::none && !self_attention())
    dq_ = arena.allocate("attn.dq", shape_.compute_dtype, max_q_rows * d);
  // The fused kernel keeps one log-sum-exp per query and head instead of every probability.
  const Device device = arena.device();
  fused_ = attention_runs_fused(shape_, device);
  if (queued == QueuedGrads::all && fused_ && self_attention())
    dqkv_ = arena.allocate("attn.dqkv", shape_.compute_dtype, 3 * max_q_rows * d);
  if (fused_) {
    lse_ = arena.allocate("attn.lse", DType::f32, max_q_rows * shape_.heads);
    // Where the CUDA kernels keep the dropout mask for backward: two words per query and head.
    // Only the head_dim 64 short-sentence kernels read them.
    if (device == Device::cuda && shape_.attention_dropout > 0 && d / shape_.heads == 64 &&
        keep_bits_switch.get())
      keep_bits_ = arena.allocate("attn.keep_bits", DType::i32, 2 * max_q_rows * shape_.heads);
  } else {
    probs_ = arena.allocate("attn.probs", DType::f32, max_scores);
  }
}

AttentionOperands AttentionBlock::projections(const Buffer& buffer, int64_t q_rows, int64_t kv_rows,
                                              bool joined) const {
  const int64_t d = shape_.d_model;
  Tensor all = buffer.flat();
  auto matrix = [&](int64_t first_row, int64_t rows, int64_t width) {
    return all.rows(first_row * d, first_row * d + rows * width).reshaped({rows, width});
  };
  if (joined && self_attention()) {  // one [rows, 3d] matrix: q | k | v
    Tensor qkv = matrix(0, q_rows, 3 * d);
    return AttentionOperands{qkv, qkv, qkv, 0, d, 2 * d};
  }
  Tensor q = matrix(0, q_rows, d);
  if (joined) {  // q, then one [kv_rows, 2d] matrix: k | v
    Tensor kv = matrix(q_rows, kv_rows, 2 * d);
    return AttentionOperands{q, kv, kv, 0, 0, d};
  }
  return AttentionOperands{q, matrix(q_rows, kv_rows, d), matrix(q_rows + kv_rows, kv_rows, d)};
}

AttentionOperands AttentionBlock::with_projected(const Buffer& buffer, const Tensor& kv_all,
                                                 int64_t q_rows) const {
  const int64_t d = shape_.d_model, k_col = projected_.k_col;
  return AttentionOperands{buffer.view({q_rows, d}), kv_all, kv_all, 0, k_col, k_col + d};
}

void AttentionBlock::project(const Tensor& xq, const Tensor& xkv, AttentionOperands& p) {
  if (fused_ && self_attention()) {
    linear_forward(xq, in_w_->compute, in_b_->compute, p.q);
    return;
  }
  linear_forward(xq, q_w_->compute, q_b_->compute, p.q);
  if (kv_projected_) return;  // the keys and values came projected
  if (fused_)
    linear_forward(xkv, in_w_->compute, in_b_->compute, p.k);
  else
    project_keys_values(xkv, p.k, p.v);
}

void AttentionBlock::forward(const Tensor& xq, const Tensor& xkv, const Tensor& kv_lengths,
                             int64_t batch, int64_t q_len, int64_t kv_len, const StepContext& ctx,
                             Tensor& out, const ProjectedKeysValues* projected) {
  int64_t d = shape_.d_model, q_rows = batch * q_len, kv_rows = batch * kv_len;
  if (self_attention() && (xq.data != xkv.data || q_len != kv_len))
    throw std::logic_error("self-attention forward: queries and keys from different inputs");
  if (projected != nullptr && (self_attention() || !fused_))
    throw std::logic_error(
        "attention forward: projected keys and values need fused cross-attention");
  kv_projected_ = projected != nullptr;
  projected_ = kv_projected_ ? *projected : ProjectedKeysValues{};
  xq_ = xq;
  xkv_ = xkv;
  kv_lengths_ = kv_lengths;
  att_ = AttentionShape{
      batch, q_len, kv_len, shape_.heads, d / shape_.heads, kind_ == AttentionKind::decoder_self};
  key_ = ctx.key(dropout_id_);
  p_ = ctx.training ? shape_.attention_dropout : 0.0f;

  AttentionOperands p = kv_projected_ ? with_projected(proj_, projected_.kv, q_rows)
                                      : projections(proj_, q_rows, kv_rows, fused_);
  project(xq, xkv, p);
  Tensor c = ctx_.view({q_rows, d});
  if (fused_) {
    Tensor lse = lse_.view({batch, shape_.heads, q_len});
    const Tensor keep_bits = keep_bits_.capacity > 0
                                 ? keep_bits_.view({fused_attention_keep_bits_words(att_)})
                                 : Tensor();
    kept_bits_ = fused_attention_forward(p, kv_lengths, c, lse, att_, p_, key_, keep_bits);
  } else {
    Tensor probs = probs_.view({batch, shape_.heads, q_len, kv_len});
    attention_forward(p.q, p.k, p.v, kv_lengths, c, probs, att_, p_, key_);
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
  Tensor q = proj_.view({rows, d}), c = ctx_.view({rows, d});  // projections()'s q
  linear_forward(xq, q_w_->compute, q_b_->compute, q);
  // The lengths mask each block's positions beyond those decoded so far, or its source's padding.
  // On the GPU one kernel does the whole attention (five launches fewer per attention, twelve
  // attentions a step); the CPU keeps the general unfused path (kv.probs is its scratch), whose
  // bits the CPU reference decoders share.
  if (xq.device == Device::cuda && cached_attention_fits(d / shape_.heads, length)) {
    cached_attention(q, kv.keys, kv.values, kv.lengths, c, shape_.heads);
  } else {
    AttentionShape shape{blocks, rows / blocks, length, shape_.heads, d / shape_.heads, false};
    attention_forward(q, kv.keys.reshaped({blocks * length, d}),
                      kv.values.reshaped({blocks * length, d}), kv.lengths, c, kv.probs, shape,
                      0.0f, RngKey{});
  }
  linear_forward(c, o_w_->compute, o_b_->compute, out);
}

void AttentionBlock::append_and_attend(const Tensor& xq, const Tensor& positions,
                                       CachedKeysValues& kv, Tensor& out) {
  const int64_t rows = xq.dim(0), d = shape_.d_model;
  if (xq.device == Device::cuda && cached_attention_fits(d / shape_.heads, kv.keys.dim(1))) {
    // One GEMM for q | k | v (the joined weights); the cache writes and the attention read its
    // column slices: two launches fewer per layer and step than three projections.
    Tensor qkv = projections(proj_, rows, rows, /*joined=*/true).q;  // [rows, 3d]
    linear_forward(xq, in_w_->compute, in_b_->compute, qkv);
    cache_write_position(qkv, positions, kv.keys, d);
    cache_write_position(qkv, positions, kv.values, 2 * d);
    Tensor c = ctx_.view({rows, d});
    cached_attention(qkv, kv.keys, kv.values, kv.lengths, c, shape_.heads);
    linear_forward(c, o_w_->compute, o_b_->compute, out);
    return;
  }
  AttentionOperands p = projections(proj_, rows, rows, /*joined=*/false);
  project_keys_values(xq, p.k, p.v);
  cache_write_position(p.k, positions, kv.keys);
  cache_write_position(p.v, positions, kv.values);
  attend_cached(xq, kv, out);
}

void AttentionBlock::backward(const Tensor& d_out, Tensor& d_xq, Tensor& d_xkv, Workspace& ws,
                              DxWrite d_xq_write) {
  int64_t d = shape_.d_model;
  int64_t q_rows = att_.batch * att_.q_len, kv_rows = att_.batch * att_.kv_len;
  Tensor c = ctx_.view({q_rows, d});
  Tensor d_ctx = ws.a1.view({q_rows, d});
  Tensor no_bias;  // a bias gradient added elsewhere: linear_backward skips its column sums
  // The model's queue (WeightGradQueue) takes the out projection's product where d_out outlives
  // this layer (the sublayer's own slot; the context is this block's), and q's (or the joined
  // q | k | v) product where its gradient has a buffer of its own (dq_, dqkv_).
  WeightGradQueue* queue = ws.open_queue();
  const bool queue_out = queue != nullptr && !ws.holds(d_out);
  const bool own_q_grads = dq_.capacity > 0 || dqkv_.capacity > 0;
  WeightGradQueue* q_queue = own_q_grads ? queue : nullptr;
  // Else cross-attention: the out projection's weight gradient waits for q's (project_backward),
  // the two d x d products over the query rows then run as one launch. d_out and the context stay
  // as they are until then (the attention backward writes the workspace's a1 and a_proj only,
  // and with projected keys and values their gradients' columns of d_kv).
  const Tensor& d_keys_values = kv_projected_ ? projected_.d_kv : d_xkv;
  const bool batch_dw = !queue_out && q_queue == nullptr && !self_attention() &&
                        batch_weight_grads_switch.get() && !detail::overlaps(d_out, d_xq) &&
                        !detail::overlaps(d_out, d_keys_values);
  const WeightGradProduct out_dw{d_out, c, o_w_->grad};
  Tensor o_dw = batch_dw || queue_out ? Tensor() : o_w_->grad;
  linear_backward(d_out, c, o_w_->compute, d_ctx, o_dw, no_bias);
  if (queue_out) queue->push(out_dw);

  AttentionOperands in = kv_projected_ ? with_projected(proj_, projected_.kv, q_rows)
                                       : projections(proj_, q_rows, kv_rows, fused_);
  const Buffer& grads_buffer = dqkv_.capacity > 0 ? dqkv_ : ws.a_proj;
  AttentionOperands grads = kv_projected_ ? with_projected(ws.a_proj, projected_.d_kv, q_rows)
                                          : projections(grads_buffer, q_rows, kv_rows, fused_);
  if (dq_.capacity > 0) grads.q = dq_.view({q_rows, d});  // q_col stays 0, as in.q's
  bool biases_summed = false;
  if (fused_) {
    Tensor lse = lse_.view({att_.batch, att_.heads, att_.q_len});
    const Tensor keep_bits =
        kept_bits_ ? keep_bits_.view({fused_attention_keep_bits_words(att_)}) : Tensor();
    // The members' gradients are the q | k | v (or k | v) slices of the joined in_b_->grad
    // (ParamStore lays a group's members out back to back). Where the kernel can, it adds the
    // gradients' column sums into them from the tiles it stages anyway, and says so.
    const AttentionBiasGrads bias_grads =
        bias_sums_switch.get() ? AttentionBiasGrads{q_b_->grad, k_b_->grad, v_b_->grad}
                               : AttentionBiasGrads{};
    biases_summed = fused_attention_backward(d_ctx, in, c, lse, kv_lengths_, grads, att_, p_, key_,
                                             keep_bits, bias_grads);
  } else {
    Tensor probs = probs_.view({att_.batch, att_.heads, att_.q_len, att_.kv_len});
    attention_backward(d_ctx, in.q, in.k, in.v, probs, kv_lengths_, grads.q, grads.k, grads.v, att_,
                       p_, key_);
  }
  biases_summed_ = biases_summed;
  project_backward(grads, d_xq, d_xkv, d_xq_write, biases_summed, batch_dw ? &out_dw : nullptr,
                   q_queue);
}

void AttentionBlock::project_backward(AttentionOperands& grads, Tensor& d_xq, Tensor& d_xkv,
                                      DxWrite d_xq_write, bool biases_summed,
                                      const WeightGradProduct* out_dw, WeightGradQueue* q_queue) {
  if (self_attention() && d_xq.data != d_xkv.data)
    throw std::logic_error("self-attention backward: d_xq and d_xkv must be one tensor");
  // Biases already summed: an empty db makes linear_backward skip its column sums.
  Tensor in_dw = in_w_->grad, in_db = biases_summed ? Tensor() : in_b_->grad;
  Tensor q_db = biases_summed ? Tensor() : q_b_->grad;
  if (fused_ && self_attention()) {  // one GEMM sums the q, k and v paths
    if (q_queue != nullptr) in_dw = Tensor();
    linear_backward(grads.q, xq_, in_w_->compute, d_xq, in_dw, in_db, d_xq_write);
    if (q_queue != nullptr) q_queue->push({grads.q, xq_, in_w_->grad});
    return;
  }
  // d_xq first (= or +=), then the key and value paths (+=, each product adding into d_xkv):
  // correct also when d_xq aliases d_xkv.
  Tensor q_dw = out_dw != nullptr || q_queue != nullptr ? Tensor() : q_w_->grad;
  linear_backward(grads.q, xq_, q_w_->compute, d_xq, q_dw, q_db, d_xq_write);
  if (q_queue != nullptr)
    q_queue->push({grads.q, xq_, q_w_->grad});
  else if (out_dw != nullptr)
    linear_weight_grads({*out_dw, {grads.q, xq_, q_w_->grad}});
  if (kv_projected_) return;  // their products are the caller's (CrossKeysValues)
  if (fused_) {               // one GEMM for the key and value paths
    linear_backward(grads.k, xkv_, in_w_->compute, d_xkv, in_dw, in_db, DxWrite::add);
    return;
  }
  linear_backward(grads.k, xkv_, k_w_->compute, d_xkv, k_w_->grad, k_b_->grad, DxWrite::add);
  linear_backward(grads.v, xkv_, v_w_->compute, d_xkv, v_w_->grad, v_b_->grad, DxWrite::add);
}

}  // namespace nmt
