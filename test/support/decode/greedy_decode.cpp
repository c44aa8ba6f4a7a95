// greedy_decode: the encoder once, then every prefix grown by its argmax token until eos, the limit
// or the end of the model's plan.
#include "test/support/decode/greedy_decode.h"

#include "data/special_ids.h"
#include "engine/model/host_copy.h"

namespace nmt::test {

std::vector<std::vector<int32_t>> greedy_decode(Transformer& model, const Batch& batch,
                                                int64_t max_new) {
  const int64_t b = batch.sentences, v = model.shape().vocab;
  Tensor memory = model.encode_sources(batch);  // [b * src_len, d_model], kept by the model
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(b));
  std::vector<int32_t> prefix_ids;
  std::vector<char> done(static_cast<size_t>(b), 0);
  std::vector<float> host_logits;
  int64_t finished = 0;
  for (int64_t t = 1; t <= max_new + 1 && finished < b; ++t) {
    if (b * t > model.max_rows() || t > model.max_len()) break;  // the plan bounds the length
    prefix_ids.assign(static_cast<size_t>(b * t), kPadId);
    for (int64_t i = 0; i < b; ++i) {
      prefix_ids[i * t] = kBosId;
      for (size_t j = 0; j < out[i].size(); ++j) prefix_ids[i * t + 1 + j] = out[i][j];
    }
    copy_to_host_f32(
        model.decode_last_logits(memory, batch.src_lengths, batch.src_len, prefix_ids, b, t),
        host_logits);  // [b, vocab]
    for (int64_t i = 0; i < b; ++i) {
      if (done[i]) continue;
      const float* row = host_logits.data() + i * v;
      int32_t best = 0;
      for (int64_t j = 1; j < v; ++j)
        if (row[j] > row[best]) best = static_cast<int32_t>(j);
      if (best == kEosId || static_cast<int64_t>(out[i].size()) >= max_new) {
        done[i] = 1;
        ++finished;
      } else {
        out[i].push_back(best);
      }
    }
  }
  return out;
}

}  // namespace nmt::test
