// IncrementalDecoder::step: one target position through every decoder layer, written out like
// DecoderLayer::forward (engine/model/transformer_layers.cpp) and Sublayer::forward
// (engine/model/sublayer.cpp) without dropout, with the self-attention reading its keys and values
// from the cache.
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/decode/incremental_decoder.h"
#include "engine/model/host_copy.h"
#include "kernels/attention.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"

namespace nmt {

template <typename F>
void IncrementalDecoder::sublayer(const Tensor& x, const Norm& norm, Tensor& out, F&& f) {
  const int64_t d = shape_.d_model;
  Tensor normed = normed_.view({rows_, d}), branch = branch_.view({rows_, d});
  Tensor mean = mean_.view({rows_}), rstd = rstd_.view({rows_});
  if (shape_.pre_norm) {
    layernorm_forward(x, norm.gain->compute, norm.bias->compute, normed, mean, rstd,
                      shape_.layernorm_eps);
    f(normed, branch);
    residual_add(x, branch, out);
  } else {
    f(x, branch);
    residual_add(x, branch, normed);
    layernorm_forward(normed, norm.gain->compute, norm.bias->compute, out, mean, rstd,
                      shape_.layernorm_eps);
  }
}

void IncrementalDecoder::self_attention(Layer& layer, const Tensor& in, int64_t position,
                                        Tensor& out) {
  const int64_t d = shape_.d_model;
  const Attention& a = layer.self_attn;
  Tensor q = q_.view({rows_, d}), k = k_new_.view({rows_, d}), v = v_new_.view({rows_, d});
  Tensor context = context_.view({rows_, d});
  linear_forward(in, a.q.weight->compute, a.q.bias->compute, q);
  linear_forward(in, a.k.weight->compute, a.k.bias->compute, k);
  linear_forward(in, a.v.weight->compute, a.v.bias->compute, v);
  Tensor k_cache = blocks(layer.self_k, rows_, positions_);
  Tensor v_cache = blocks(layer.self_v, rows_, positions_);
  cache_write_position(k, k_cache, position);
  cache_write_position(v, v_cache, position);
  // One query per row over its cached positions: every row sees keys [0, position], which is the
  // causal mask of its last position in the full decoder.
  AttentionShape shape{rows_, 1, positions_, shape_.heads, d / shape_.heads, false};
  Tensor lengths = step_ints_.flat().rows(rows_, 2 * rows_);
  Tensor probs = self_probs_.view({rows_, shape_.heads, 1, positions_});
  attention_forward(q, k_cache.reshaped({rows_ * positions_, d}),
                    v_cache.reshaped({rows_ * positions_, d}), lengths, context, probs, shape, 0.0f,
                    RngKey{});
  linear_forward(context, a.out.weight->compute, a.out.bias->compute, out);
}

void IncrementalDecoder::cross_attention(const Layer& layer, const Tensor& in, Tensor& out) {
  const int64_t d = shape_.d_model;
  const Attention& a = layer.cross_attn;
  Tensor q = q_.view({rows_, d}), context = context_.view({rows_, d});
  linear_forward(in, a.q.weight->compute, a.q.bias->compute, q);
  // The beam rows of a source are consecutive, so they are that source's `beam` queries: the
  // source's keys and values are stored (and computed) once, not once per hypothesis.
  AttentionShape shape{sources_, beam_, src_len_, shape_.heads, d / shape_.heads, false};
  Tensor probs = cross_probs_.view({sources_, shape_.heads, beam_, src_len_});
  Tensor lengths = source_lengths_.view({sources_});
  attention_forward(q, layer.cross_k.view({sources_ * src_len_, d}),
                    layer.cross_v.view({sources_ * src_len_, d}), lengths, context, probs, shape,
                    0.0f, RngKey{});
  linear_forward(context, a.out.weight->compute, a.out.bias->compute, out);
}

void IncrementalDecoder::feed_forward(const Layer& layer, const Tensor& in, Tensor& out) {
  Tensor hidden = ffn_hidden_.view({rows_, shape_.ffn_dim});
  linear_forward(in, layer.fc1.weight->compute, layer.fc1.bias->compute, hidden);
  relu_forward(hidden, hidden);
  linear_forward(hidden, layer.fc2.weight->compute, layer.fc2.bias->compute, out);
}

Tensor IncrementalDecoder::step(const std::vector<int32_t>& tokens, int64_t position) {
  const int64_t d = shape_.d_model;
  if (rows_ < 1)
    throw std::invalid_argument("incremental decoder: step without rows (start first)");
  if (static_cast<int64_t>(tokens.size()) != rows_)
    throw std::invalid_argument("incremental decoder: " + std::to_string(tokens.size()) +
                                " tokens for " + std::to_string(rows_) + " rows");
  if (position != next_position_ || position >= positions_)
    throw std::invalid_argument("incremental decoder: position " + std::to_string(position) +
                                " out of order (next " + std::to_string(next_position_) + ", " +
                                std::to_string(positions_) + " planned)");
  // One upload per step: the ids, then every row's self-attention length (position + 1).
  host_ints_.assign(tokens.begin(), tokens.end());
  host_ints_.resize(static_cast<size_t>(2 * rows_), static_cast<int32_t>(position + 1));
  upload_i32(host_ints_, step_ints_);
  Tensor ints = step_ints_.view({2 * rows_});

  Tensor x = hidden_[0].view({rows_, d}), y = hidden_[1].view({rows_, d});
  embedding_forward_at(ints.rows(0, rows_), embedding_->compute, x, position,
                       std::sqrt(static_cast<float>(d)), kPadId);
  for (Layer& layer : layers_) {
    sublayer(x, layer.self_norm, y,
             [&](const Tensor& in, Tensor& out) { self_attention(layer, in, position, out); });
    sublayer(y, layer.cross_norm, x,
             [&](const Tensor& in, Tensor& out) { cross_attention(layer, in, out); });
    sublayer(x, layer.ffn_norm, y,
             [&](const Tensor& in, Tensor& out) { feed_forward(layer, in, out); });
    std::swap(x, y);
  }
  if (shape_.pre_norm) {
    Tensor mean = mean_.view({rows_}), rstd = rstd_.view({rows_});
    layernorm_forward(x, final_norm_.gain->compute, final_norm_.bias->compute, y, mean, rstd,
                      shape_.layernorm_eps);
    std::swap(x, y);
  }
  next_position_ = position + 1;
  Tensor logits = logits_.view({rows_, shape_.vocab});
  Tensor no_bias;
  linear_forward(x, output_weight_->compute, no_bias, logits);
  return logits;
}

}  // namespace nmt
