// CrossKeysValues: every decoder layer's cross-attention keys and values in one GEMM each way.
#include "engine/model/cross_keys_values.h"

#include <stdexcept>

#include "kernels/env_switch.h"
#include "kernels/linear.h"

namespace nmt {
namespace {

EnvSwitch all_layers_switch("NMT_CROSS_KV_ALL_LAYERS", /*default_on=*/true);

}  // namespace

bool cross_kv_all_layers() {
  return all_layers_switch.get();
}
void set_cross_kv_all_layers(bool on) {
  all_layers_switch.set(on);
}

CrossKeysValues::CrossKeysValues(ParamStore& store,
                                 const std::vector<const AttentionBlock*>& layers,
                                 const Param* before)
    : layers_(layers) {
  std::vector<const ParamGroup*> weights, biases;
  for (const AttentionBlock* layer : layers) {
    weights.push_back(layer->joined_weights());
    biases.push_back(layer->joined_biases());
  }
  weights_ = store.join_groups(weights, before);
  biases_ = store.join_groups(biases, before);
}

void CrossKeysValues::plan(Arena& arena, int64_t max_rows, DType dtype, bool on, bool training) {
  on_ = on;
  if (!on) return;
  kv_ = arena.allocate("cross_kv.all", dtype, max_rows * width());
  if (training) d_kv_ = arena.allocate("cross_kv.grad", dtype, max_rows * width());
}

void CrossKeysValues::forward(const Tensor& enc_out) {
  if (!on_) throw std::logic_error("CrossKeysValues::forward: not planned on");
  enc_out_ = enc_out;
  Tensor kv = kv_.view({enc_out.dim(0), width()});
  linear_forward(enc_out, weights_->compute, biases_->compute, kv);
}

ProjectedKeysValues CrossKeysValues::layer(int64_t l) const {
  const int64_t rows = enc_out_.dim(0);
  // A decoding model plans no gradient buffer: its layers' backward never runs.
  const Tensor d_kv = d_kv_.capacity > 0 ? d_kv_.view({rows, width()}) : Tensor();
  return ProjectedKeysValues{kv_.view({rows, width()}), d_kv, l * 2 * d_model()};
}

void CrossKeysValues::backward(Tensor& d_enc_out) {
  if (d_kv_.capacity == 0)
    throw std::logic_error("CrossKeysValues::backward: the model was planned without training");
  // The fused backward sums the bias gradients itself or not by the attention's shape, which
  // every layer shares: all layers did, or none did.
  const bool summed = layers_[0]->backward_summed_biases();
  for (const AttentionBlock* layer : layers_)
    if (layer->backward_summed_biases() != summed)
      throw std::logic_error("CrossKeysValues::backward: the layers summed their biases unevenly");
  Tensor d_kv = d_kv_.view({enc_out_.dim(0), width()});
  Tensor dw = weights_->grad, db = summed ? Tensor() : biases_->grad;
  linear_backward(d_kv, enc_out_, weights_->compute, d_enc_out, dw, db, DxWrite::assign);
}

std::vector<const Param*> CrossKeysValues::params() const {
  std::vector<const Param*> params(weights_->members.begin(), weights_->members.end());
  params.insert(params.end(), biases_->members.begin(), biases_->members.end());
  return params;
}

}  // namespace nmt
