// greedy_decode: the tests' greedy reference, one whole-prefix decoder pass per output position
// (Transformer::decode_last_logits over the batch's encoder output) and the argmax of each
// sentence's last logits, ties to the lower id. Beam search with beam 1 must find these tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "engine/model/transformer.h"

namespace nmt::test {

// Up to max_new tokens per sentence of batch's sources (eos excluded), within the model's plan.
std::vector<std::vector<int32_t>> greedy_decode(Transformer& model, const Batch& batch,
                                                int64_t max_new);

}  // namespace nmt::test
