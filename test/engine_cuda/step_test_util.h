// What the GPU training-step suites share: a small model with dropout everywhere, two small batch
// shapes to interleave, and a tensor's values as bits (for comparing gradients exactly).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"
#include "kernels/tensor.h"

namespace nmt::test {

// d_model 128 (the LayerNorm kernels' 8-element register path), two heads, dropout 0.1 at every
// site, two encoder layers.
inline ModelShape dropout_step_shape(DType dtype, bool pre_norm, int64_t decoder_layers) {
  ModelShape s;
  s.vocab = 101;
  s.d_model = 128;
  s.heads = 2;
  s.ffn_dim = 264;
  s.encoder_layers = 2;
  s.decoder_layers = decoder_layers;
  s.dropout = 0.1f;
  s.attention_dropout = 0.1f;
  s.relu_dropout = 0.1f;
  s.pre_norm = pre_norm;
  s.compute_dtype = dtype;
  return s;
}

// Two shapes: 3 sentences x (16, 8) padded tokens (which == 0) and 2 x (8, 16).
inline Batch batch_of_shape(int which) {
  std::vector<std::vector<int32_t>> src, tgt;
  if (which == 0) {
    src = {{4, 5, 6, 7, 8, 9, 10, 11, 12}, {9, 4}, {5, 5, 6, 30, 31}};
    tgt = {{8, 7, 6, 20}, {4, 9, 10, 5, 36}, {6}};
  } else {
    src = {{40, 41, 42}, {50, 51, 52, 53, 54, 55}};
    tgt = {{60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70}, {71, 72}};
  }
  std::vector<int64_t> ids(src.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  return make_batch(src, tgt, ids, 8);
}

// The values of t (any float dtype, either device), as f32 bit patterns.
inline std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  Tensor host(values.data(), DType::f32, Device::cpu, {t.numel()});
  copy_tensor(t.reshaped({t.numel()}), host);
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// The parameters whose gradients differ in any bit between two models of one shape.
inline std::vector<std::string> grads_differing(Transformer& a, Transformer& b) {
  std::vector<std::string> names;
  for (size_t p = 0; p < a.params().params().size(); ++p)
    if (bits_of(a.params().params()[p].grad) != bits_of(b.params().params()[p].grad))
      names.push_back(a.params().params()[p].name);
  return names;
}

}  // namespace nmt::test
