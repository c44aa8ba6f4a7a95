// Helpers for the incremental-decoder suites (CPU and CUDA): a small model with every parameter
// perturbed (so biases and norm gains matter), and a scripted decoding run that compares every
// step's logits with Transformer::decode_last_logits on the rows' whole prefixes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/transformer.h"

namespace nmt::test {

// A 2+2-layer model (d 32, 4 heads, ffn 48, vocabulary 40), plan 512 rows x length 32, with
// initialize(seed) then uniform noise of +-0.1 added to every master weight.
std::unique_ptr<Transformer> perturbed_model(Device device, DType compute, bool pre_norm,
                                             bool shared_embeddings, uint64_t seed);

struct StepComparison {
  int64_t steps = 0, rows = 0;           // steps run; logit rows compared in all
  int64_t argmax_agree = 0;              // rows whose argmax matches
  double max_abs_diff = 0;               // over every logit
  double max_abs_logit = 0;              // the reference's largest |logit|
  bool bit_identical = true;             // every logit equal
  std::vector<float> incremental, full;  // every compared logit row of each path, in order
};

// Three sources (lengths 5, 3, 7) x beam 2, nine positions of pseudo-random tokens; after position
// 3 rows are reordered inside their sources, after position 5 the middle source drops out.
StepComparison compare_incremental_with_full(Transformer& model, uint64_t seed);

}  // namespace nmt::test
