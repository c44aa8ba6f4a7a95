// Counted FLOPs of training the Transformer (engine/model/transformer.cpp): the matrix products of
// one batch, as a function of the model shape and the padded batch dimensions. The numerator of
// MFU.
#pragma once

#include <cstdint>

#include "data/batch.h"
#include "engine/model/model_shape.h"

namespace nmt {

// The padded dimensions of one (micro-)batch: what the kernels multiply, padding included.
struct BatchDims {
  int64_t sentences = 0;  // B
  int64_t src_len = 0;    // S: padded source length
  int64_t tgt_len = 0;    // T: padded target length (decoder positions)
};
BatchDims batch_dims(const Batch& batch);

// FLOPs (2 per multiply-add) of the forward pass's matrix products: per encoder layer the q/k/v/out
// projections, the attention scores Q·Kᵀ and context P·V, fc1 and fc2; per decoder layer the
// same for causal self-attention and for cross-attention (k and v projected from the encoder
// output), fc1 and fc2; the output projection to the vocabulary. Counted on the padded shapes,
// with full (not causally halved) score squares, because that is what the kernels compute.
// Embeddings, layer norms, softmax, dropout and the loss are not matrix products and not counted.
double forward_matmul_flops(const ModelShape& shape, const BatchDims& dims);

// Forward + backward = 3 × forward: backward computes two products of each forward product's size
// (the input gradient and the weight gradient; for attention, dP and dV, then dQ and dK).
double training_flops(const ModelShape& shape, const BatchDims& dims);

}  // namespace nmt
