// What the GPU training-step suites share: a small model with dropout everywhere, two small batch
// shapes to interleave, a tensor's values as bits (for comparing gradients exactly), and steps of
// models that must give a reference model's bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/model/model_shape.h"
#include "engine/model/transformer.h"
#include "kernels/elementwise.h"
#include "kernels/tensor.h"
#include "test/support/catch.h"

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
inline std::vector<float> values_of(const Tensor& t) {
  std::vector<float> values(static_cast<size_t>(t.numel()));
  Tensor host(values.data(), DType::f32, Device::cpu, {t.numel()});
  copy_tensor(t.reshaped({t.numel()}), host);
  return values;
}
inline std::vector<uint32_t> bits_of(const Tensor& t) {
  const std::vector<float> values = values_of(t);
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// Training steps over the shapes A B A B A A (batch_of_shape) on `reference` and on each of
// `models`, from zeroed gradients, with step numbers first_step, first_step + 1, ...: every model's
// loss sums and gradient bits must be the reference's (Catch2 CHECKs). After every second step each
// model evaluates the other shape (no dropout) and must give the reference's loss. A model with
// CUDA graphs on runs A's first step op by op, captures its second and replays the later ones
// (4 replays). after_step(model, reference), where given, runs after each model's step and
// evaluation (a suite's own checks).
inline void check_steps_match(
    Transformer& reference, std::initializer_list<Transformer*> models, uint64_t seed,
    uint64_t first_step, float loss_scale,
    const std::function<void(Transformer&, Transformer&, bool evaluated)>& after_step = {}) {
  const int shapes[] = {0, 1, 0, 1, 0, 0};
  for (int i = 0; i < 6; ++i) {
    INFO("step " << i);
    const Batch batch = batch_of_shape(shapes[i]);
    const StepContext ctx{seed, first_step + static_cast<uint64_t>(i), true};
    struct Outcome {
      LossSums loss;
      std::vector<uint32_t> grads;
    };
    const auto step = [&](Transformer& model) {
      model.zero_grads();
      Outcome out{model.forward_backward(batch, ctx, 0.1f, loss_scale), {}};
      out.grads = bits_of(model.params().grads());
      return out;
    };
    const Outcome expected = step(reference);
    for (Transformer* model : models) {
      INFO((model->train_graph_stats() != nullptr ? "CUDA graphs" : "op by op"));
      const Outcome got = step(*model);
      if (after_step) after_step(*model, reference, false);
      CHECK(got.loss.loss == expected.loss.loss);
      CHECK(got.loss.nll == expected.loss.nll);
      CHECK(got.loss.tokens == expected.loss.tokens);
      CHECK(got.grads == expected.grads);
    }
    if (i % 2 == 1) {
      const Batch other = batch_of_shape(1 - shapes[i]);
      const double loss = reference.evaluate(other, 0.1f).loss;
      for (Transformer* model : models) {
        CHECK(model->evaluate(other, 0.1f).loss == loss);
        if (after_step) after_step(*model, reference, true);
      }
    }
  }
}

// The graph counters of a model with CUDA graphs on after the A B A B A A steps above (or a
// suite's own of that pattern): each shape's first step op by op, its second captured, the later
// ones replayed, and no capture given up.
inline const TrainGraphStats& check_abab_graph_counts(const Transformer& model) {
  const TrainGraphStats* stats = model.train_graph_stats();
  REQUIRE(stats != nullptr);
  INFO("graphs given up: " << stats->failure);
  CHECK(stats->failure.empty());
  CHECK(stats->eager_steps == 2);
  CHECK(stats->captures == 2);
  CHECK(stats->replays == 4);
  return *stats;
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
