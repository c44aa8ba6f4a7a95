// CrossKeysValues: the keys and values of every decoder layer's cross-attention, projected from the
// encoder output by one GEMM, and their gradients taken back by one linear_backward after the
// whole decoder stack.
//
// Each layer would otherwise project the encoder output through its own [2d, d] k | v weight and,
// in backward, add its own input gradient into d_enc_out and run its own weight-gradient product:
// L small GEMMs of each kind. Here the layers' k | v weights are one [L * 2d, d] group
// [k0; v0; k1; v1; ...] (ParamStore::join_groups; each layer still sees its own [2d, d] slice),
// forward writes kv_all [src_rows, L * 2d] once, layer l's fused attention reads columns
// [l * 2d, (l + 1) * 2d) of it and writes their gradients into the same columns of d_kv_all, and
// one product sums every layer's input gradient in one f32 accumulation (d_enc_out written, not
// added to L times).
//
// The joined group is always laid out (it is a layout, not a switch); the one-GEMM path runs where
// every cross-attention takes the fused path (attention_runs_fused) and the switch below is on.
// Elsewhere the layers project their keys and values one by one as before, over the same slices.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/arena.h"
#include "engine/model/attention_block.h"
#include "engine/model/model_shape.h"
#include "engine/model/param_store.h"

namespace nmt {

// NMT_CROSS_KV_ALL_LAYERS=0 (or set_cross_kv_all_layers(false)) keeps the per-layer projections
// (for A/B timing). Read when a Transformer plans its memory: a model keeps the path it was
// planned with.
bool cross_kv_all_layers();
void set_cross_kv_all_layers(bool on);

class CrossKeysValues {
 public:
  // layers: every decoder layer's cross-attention, in layer order (at least one). Joins their
  // k | v weights into one [L * 2d, d] group and their biases into one [L * 2d], laid out directly
  // in front of `before` (the Transformer names the parameter registered just before the decoder
  // layers, so the group comes after the decoder layers in the layout: where backward finishes it).
  CrossKeysValues(ParamStore& store, const std::vector<const AttentionBlock*>& layers,
                  const Param* before);

  // Plans kv_all (and d_kv_all where `training`) for up to max_rows encoder rows in `dtype` (the
  // activations') when `on`, nothing otherwise.
  void plan(Arena& arena, int64_t max_rows, DType dtype, bool on, bool training = true);
  // Whether the model was planned to project all layers at once.
  bool on() const { return on_; }

  // enc_out: [rows, d_model], kept until backward. Writes every layer's keys and values.
  void forward(const Tensor& enc_out);
  // Layer l's keys and values (and where its backward writes their gradients) of the last forward.
  ProjectedKeysValues layer(int64_t l) const;
  // After every layer's backward has written its columns of d_kv_all: d_enc_out [rows, d_model]
  // written (=); the k and v weight gradients accumulated (+=), their bias gradients too unless
  // the layers' fused attention backward summed them already.
  void backward(Tensor& d_enc_out);

  // The layers' k and v weights and biases: the parameters backward() finishes.
  std::vector<const Param*> params() const;

 private:
  int64_t width() const { return weights_->shape[0]; }  // L * 2 * d_model
  int64_t d_model() const { return weights_->shape[1]; }

  std::vector<const AttentionBlock*> layers_;
  const ParamGroup *weights_, *biases_;  // [L * 2d, d_model], [L * 2d]
  bool on_ = false;
  Buffer kv_, d_kv_;  // [max_rows, L * 2d] compute dtype each, when on_
  Tensor enc_out_;    // [rows, d_model]: forward's input, for backward
};

}  // namespace nmt
