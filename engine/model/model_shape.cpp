// model_shape_from: the one place a model config becomes the shape the graph is built from.
#include "engine/model/model_shape.h"

namespace nmt {

ModelShape model_shape_from(const ModelConfig& m, int64_t vocab, DType compute_dtype) {
  ModelShape s;
  s.vocab = vocab;
  s.d_model = m.d_model;
  s.heads = m.num_heads;
  s.ffn_dim = m.ffn_dim;
  s.encoder_layers = m.encoder_layers;
  s.decoder_layers = m.decoder_layers;
  s.dropout = static_cast<float>(m.dropout);
  s.attention_dropout = static_cast<float>(m.attention_dropout);
  s.relu_dropout = static_cast<float>(m.relu_dropout);
  s.layernorm_eps = static_cast<float>(m.layernorm_eps);
  s.pre_norm = m.norm == NormPosition::pre;
  s.shared_embeddings = m.shared_embeddings;
  s.max_positions = m.max_positions;
  s.compute_dtype = compute_dtype;
  return s;
}

}  // namespace nmt
