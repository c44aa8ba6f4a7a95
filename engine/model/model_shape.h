// ModelShape: the architecture hyper-parameters the Transformer graph is built from, and the
// per-step context (seed, step, train/eval) that keys dropout.
#pragma once

#include <cstdint>

#include "engine/config/config.h"
#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt {

struct ModelShape {
  int64_t vocab = 0;
  int64_t d_model = 512;
  int64_t heads = 8;
  int64_t ffn_dim = 2048;
  int64_t encoder_layers = 6;
  int64_t decoder_layers = 6;
  float dropout = 0.1f;            // embeddings and every residual branch
  float attention_dropout = 0.1f;  // attention probabilities
  float relu_dropout = 0.1f;       // inside the feed-forward block
  float layernorm_eps = 1e-6f;
  bool pre_norm = false;          // false: post-norm (the paper); true: pre-norm
  bool shared_embeddings = true;  // one table for source, target and output projection
  int64_t max_positions = 1024;   // longest sentence (tokens, bos/eos included) it takes
  // Activations, their gradients and the working copy of the weights (f32, bf16 or f16); master
  // weights, parameter gradients, statistics and optimizer state stay fp32.
  DType compute_dtype = DType::f32;
  // Run the fused attention path (joined q/k/v projections, kernels/fused_attention.h) on the
  // CPU too, with its f32 reference: for tests of that path without a GPU. CUDA takes it wherever
  // its kernels serve the dtype.
  bool cpu_fused_attention = false;
};

// The Transformer shape a model config describes, for a vocabulary of `vocab` entries, computing
// in `compute_dtype`: the one place the model section becomes a shape. Everything after it (the
// trainer, decoding, nmt-score) reads the model's shape, not the config.
ModelShape model_shape_from(const ModelConfig& m, int64_t vocab, DType compute_dtype = DType::f32);

struct StepContext {
  uint64_t seed = 0;
  uint64_t step = 0;  // keys dropout masks: same (seed, step) → same masks, on any backend
  bool training = true;
  // On the GPU, `step` in device memory, which the kernels read instead (RngKey::step_on_device):
  // set by Transformer::forward_backward so that a captured step replays at any step.
  const uint64_t* step_on_device = nullptr;

  // The key of the dropout site `tensor_id` at this step.
  RngKey key(uint32_t tensor_id) const { return RngKey{seed, step, tensor_id, step_on_device}; }
};

}  // namespace nmt
