// CrossKeysValues: every decoder layer's cross-attention keys and values projected by one GEMM
// (and taken back by one product after the decoder stack) give the per-layer path's outputs and
// gradients; the layers' k, v weights and biases sit back to back after the decoder layers; the
// parameter names, initial values and checkpoint files do not depend on that layout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "data/batch.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/cross_keys_values.h"
#include "engine/model/transformer.h"
#include "test/support/catch.h"
#include "test/support/lib/scratch_dir.h"

namespace {

using nmt::Batch;
using nmt::ModelShape;
using nmt::Param;
using nmt::Transformer;

constexpr int64_t kRows = 64, kMaxLen = 16;

ModelShape three_decoder_layers() {
  ModelShape s;
  s.vocab = 29;
  s.d_model = 16;
  s.heads = 2;
  s.ffn_dim = 24;
  s.encoder_layers = 2;
  s.decoder_layers = 3;
  s.dropout = 0.1f;
  s.attention_dropout = 0.15f;  // the same Philox masks on both paths
  s.relu_dropout = 0.1f;
  return s;
}

Batch ragged_batch() {
  std::vector<std::vector<int32_t>> src = {{4, 5, 6, 7, 8, 9, 10}, {9, 4}, {5, 5, 6, 11}};
  std::vector<std::vector<int32_t>> tgt = {{8, 7, 6}, {4, 9, 10, 5, 12}, {6}};
  return nmt::make_batch(src, tgt, {0, 1, 2}, 1);
}

// A model built with the one-GEMM path on or off (the switch is read when it plans its memory).
std::unique_ptr<Transformer> model_with(const ModelShape& s, bool all_layers) {
  const bool before = nmt::cross_kv_all_layers();
  nmt::set_cross_kv_all_layers(all_layers);
  auto model = std::make_unique<Transformer>(s, nmt::Device::cpu, kRows, kMaxLen);
  nmt::set_cross_kv_all_layers(before);
  return model;
}

struct Results {
  double loss = 0;
  std::vector<float> grads;   // every parameter's, by name (registration order)
  std::vector<float> logits;  // decode_last_logits of the batch's targets, dropout off
  size_t arena_bytes = 0;
};

Results run(const ModelShape& s, bool all_layers) {
  auto model = model_with(s, all_layers);
  Results r;
  r.arena_bytes = model->arena_bytes();
  model->params().initialize(7);
  const Batch b = ragged_batch();
  model->zero_grads();
  r.loss = model->forward_backward(b, nmt::StepContext{11, 4, /*training=*/true}, 0.1f).loss;
  for (const Param& p : model->params().params())
    r.grads.insert(r.grads.end(), p.grad.f32(), p.grad.f32() + p.numel);
  nmt::Tensor memory = model->encode_sources(b);
  std::vector<int32_t> prefixes(b.tgt_in.begin(), b.tgt_in.end());
  nmt::Tensor logits =
      model->decode_last_logits(memory, b.src_lengths, b.src_len, prefixes, b.sentences, b.tgt_len);
  r.logits.assign(logits.f32(), logits.f32() + logits.numel());
  return r;
}

// The largest difference relative to the largest magnitude of `a`.
double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
  }
  return worst / scale;
}

}  // namespace

TEST_CASE("one GEMM for every layer's cross-attention keys and values gives the per-layer path",
          "[engine]") {
  for (bool pre_norm : {false, true}) {
    INFO("pre_norm " << pre_norm);
    ModelShape s = three_decoder_layers();
    s.pre_norm = pre_norm;
    s.cpu_fused_attention = true;  // the path CUDA takes in bf16/f16, with the f32 reference
    const Results per_layer = run(s, false), all_layers = run(s, true);
    // The plan says which path ran: kv_all [rows, L * 2d] takes the place of the layers' own key
    // and value buffers, d_kv_all [rows, L * 2d] is added.
    CHECK(all_layers.arena_bytes - per_layer.arena_bytes ==
          static_cast<size_t>(kRows * s.decoder_layers * 2 * s.d_model) * sizeof(float));
    CHECK(all_layers.loss == Approx(per_layer.loss).epsilon(1e-6));
    REQUIRE(all_layers.grads.size() == per_layer.grads.size());
    REQUIRE(all_layers.logits.size() == per_layer.logits.size());
    // f32 rounding only: the sums run in another order (the encoder output's gradient in one
    // product over all layers instead of one addition per layer).
    CHECK(worst_relative(per_layer.grads, all_layers.grads) < 1e-5);
    CHECK(worst_relative(per_layer.logits, all_layers.logits) < 1e-6);
  }
}

TEST_CASE("the unfused path ignores the switch: the per-layer projections, the same plan",
          "[engine]") {
  const ModelShape s = three_decoder_layers();  // cpu_fused_attention off: no fused attention
  const Results off = run(s, false), on = run(s, true);
  CHECK(on.arena_bytes == off.arena_bytes);
  CHECK(on.loss == off.loss);
  CHECK(on.grads == off.grads);
}

TEST_CASE("every decoder layer's cross-attention k and v sit back to back after the decoder layers",
          "[engine]") {
  for (bool pre_norm : {false, true})
    for (bool shared : {false, true}) {
      INFO("pre_norm " << pre_norm << ", shared embeddings " << shared);
      ModelShape s = three_decoder_layers();
      s.pre_norm = pre_norm;
      s.shared_embeddings = shared;
      Transformer model(s, nmt::Device::cpu, kRows, kMaxLen);
      const nmt::ParamStore& ps = model.params();
      const int64_t d = s.d_model, layers = s.decoder_layers;
      auto cross = [](int64_t l, const char* member) {
        return "decoder.layers." + std::to_string(l) + ".encoder_attn." + member;
      };
      const int64_t weights = ps.find(cross(0, "k_proj.weight"))->offset;
      const int64_t biases = weights + layers * 2 * d * d;
      for (int64_t l = 0; l < layers; ++l) {
        INFO("layer " << l);
        CHECK(ps.find(cross(l, "k_proj.weight"))->offset == weights + l * 2 * d * d);
        CHECK(ps.find(cross(l, "v_proj.weight"))->offset == weights + l * 2 * d * d + d * d);
        CHECK(ps.find(cross(l, "k_proj.bias"))->offset == biases + l * 2 * d);
        CHECK(ps.find(cross(l, "v_proj.bias"))->offset == biases + l * 2 * d + d);
      }
      // After every other parameter of the decoder layers (backward finishes them first), in front
      // of what was registered just before the decoder layers.
      int64_t decoder_end = 0;
      const Param* before_decoder = nullptr;
      for (size_t i = 0; i < ps.params().size(); ++i) {
        const Param& p = ps.params()[i];
        const bool in_layers = p.name.rfind("decoder.layers.", 0) == 0;
        const bool joined = in_layers && p.name.find(".encoder_attn.") != std::string::npos &&
                            (p.name.find(".k_proj.") != std::string::npos ||
                             p.name.find(".v_proj.") != std::string::npos);
        if (in_layers && !joined) decoder_end = std::max(decoder_end, p.offset + p.numel);
        if (p.name == "decoder.layers.0.self_attn.q_proj.weight")
          before_decoder = &ps.params()[i - 1];
      }
      REQUIRE(before_decoder != nullptr);
      CHECK(decoder_end == weights);
      CHECK(before_decoder->offset == biases + layers * 2 * d);
    }
}

TEST_CASE("parameter names, initial values and the checkpoint file do not depend on the layout",
          "[engine][checkpoint]") {
  ModelShape s = three_decoder_layers();
  s.shared_embeddings = false;
  Transformer model(s, nmt::Device::cpu, kRows, kMaxLen);
  model.params().initialize(5);
  // The same parameters registered in the same order, none joined: the layout of a store that
  // only follows registration.
  nmt::ParamStore plain;
  for (const Param& p : model.params().params()) plain.add(p.name, p.shape, p.kind);
  nmt::Arena arena(nmt::Device::cpu,
                   2 * sizeof(float) * static_cast<size_t>(model.params().total_elements()) + 1024);
  plain.finalize(arena, nmt::DType::f32);
  plain.initialize(5);
  REQUIRE(plain.params().size() == model.params().params().size());
  bool moved = false;
  for (const Param& p : model.params().params()) {
    const Param* twin = plain.find(p.name);
    REQUIRE(twin != nullptr);
    moved = moved || twin->offset != p.offset;
    INFO(p.name);
    CHECK(std::memcmp(twin->value.f32(), p.value.f32(), sizeof(float) * p.numel) == 0);
  }
  CHECK(moved);  // the layouts do differ

  nmt::RunConfig cfg;
  cfg.model.d_model = s.d_model;
  cfg.model.num_heads = s.heads;
  cfg.model.ffn_dim = s.ffn_dim;
  cfg.model.encoder_layers = s.encoder_layers;
  cfg.model.decoder_layers = s.decoder_layers;
  cfg.model.shared_embeddings = false;
  nmt::CheckpointState state;
  state.step = 1;
  nmt::test::ScratchDir dir("nmt-cross-kv");
  const nmt::Tensor none;
  const std::string joined_ckpt =
      nmt::save_checkpoint(dir.file("joined"), model.params(), none, none, state, cfg, 0).path;
  const std::string plain_ckpt =
      nmt::save_checkpoint(dir.file("plain"), plain, none, none, state, cfg, 0).path;
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  const std::vector<char> joined_file = bytes(joined_ckpt + "/model.safetensors");
  CHECK(!joined_file.empty());
  CHECK(joined_file == bytes(plain_ckpt + "/model.safetensors"));

  // And back: the plain store's checkpoint loads into the joined layout, every value in place.
  Transformer loaded(s, nmt::Device::cpu, kRows, kMaxLen);
  loaded.params().initialize(6);
  nmt::load_model_weights(plain_ckpt, loaded.params());
  for (const Param& p : loaded.params().params()) {
    INFO(p.name);
    CHECK(std::memcmp(plain.find(p.name)->value.f32(), p.value.f32(), sizeof(float) * p.numel) ==
          0);
  }
}
