// The incremental-decoder comparison run: the same token histories fed to IncrementalDecoder one
// position at a time and to Transformer::decode_last_logits whole, with reorders in between.
#include "test/decode/incremental_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "data/special_ids.h"
#include "engine/decode/incremental_decoder.h"
#include "engine/model/arena.h"
#include "engine/model/host_copy.h"
#include "kernels/elementwise.h"

namespace nmt::test {

std::unique_ptr<Transformer> perturbed_model(Device device, DType compute, bool pre_norm,
                                             bool shared_embeddings, uint64_t seed) {
  ModelShape shape;
  shape.vocab = 40;
  shape.d_model = 32;
  shape.heads = 4;
  shape.ffn_dim = 48;
  shape.encoder_layers = shape.decoder_layers = 2;
  shape.dropout = shape.attention_dropout = shape.relu_dropout = 0;
  shape.pre_norm = pre_norm;
  shape.shared_embeddings = shared_embeddings;
  shape.compute_dtype = compute;
  auto model = std::make_unique<Transformer>(shape, device, 512, 32);
  model->params().initialize(seed);
  Tensor master = model->params().master();
  std::vector<float> host(static_cast<size_t>(master.numel()));
  Tensor host_view(host.data(), DType::f32, Device::cpu, {master.numel()});
  copy_tensor(master, host_view);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> noise(-0.1f, 0.1f);
  for (float& x : host) x += noise(rng);
  copy_tensor(host_view, master);
  model->params().sync_compute();
  return model;
}

namespace {

// Host copy of logits [rows, vocab] as float.
std::vector<float> host_floats(const Tensor& t) {
  std::vector<float> out;
  copy_to_host_f32(t, out);
  return out;
}

void compare(const std::vector<float>& got, const std::vector<float>& want, int64_t rows,
             int64_t vocab, StepComparison& c) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = got.data() + r * vocab;
    const float* w = want.data() + r * vocab;
    c.argmax_agree += std::max_element(g, g + vocab) - g == std::max_element(w, w + vocab) - w;
    for (int64_t j = 0; j < vocab; ++j) {
      c.max_abs_diff = std::max(c.max_abs_diff, std::fabs(static_cast<double>(g[j]) - w[j]));
      c.max_abs_logit = std::max(c.max_abs_logit, std::fabs(static_cast<double>(w[j])));
      c.bit_identical = c.bit_identical && g[j] == w[j];
    }
  }
  c.rows += rows;
}

}  // namespace

StepComparison compare_incremental_with_full(Transformer& model, uint64_t seed) {
  const int64_t beam = 2, positions = 9, d = model.shape().d_model, vocab = model.shape().vocab;
  const std::vector<std::vector<int32_t>> sources{
      {5, 6, 7, 8, 9}, {10, 11, 12}, {13, 14, 15, 16, 17, 18, 19}};
  std::vector<std::vector<int32_t>> no_targets(sources.size());
  Batch batch = make_batch(sources, no_targets, {0, 1, 2}, 1);
  const int64_t src_len = batch.src_len, sentences = batch.sentences;

  // The encoder output, kept in our own buffer: replicated per row for the full decoder.
  const DType act = model.shape().compute_dtype;
  Arena planner = Arena::planner(model.device());
  planner.allocate("encoded", act, sentences * src_len * d);
  planner.allocate("replicated", act, sentences * beam * src_len * d);
  Arena arena(model.device(), planner.used());
  Tensor encoded =
      arena.allocate("encoded", act, sentences * src_len * d).view({sentences * src_len, d});
  Buffer replicated = arena.allocate("replicated", act, sentences * beam * src_len * d);
  copy_tensor(model.encode_sources(batch), encoded);

  IncrementalCapacity capacity{sentences * beam, src_len, positions, 0};
  IncrementalDecoder decoder(model, capacity);
  decoder.start(encoded, batch.src_lengths, src_len, beam, positions);

  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> token(kFirstRegularId, static_cast<int32_t>(vocab) - 1);
  std::vector<std::vector<int32_t>> history(static_cast<size_t>(sentences * beam));
  std::vector<int32_t> row_source(history.size());
  for (size_t r = 0; r < history.size(); ++r) row_source[r] = static_cast<int32_t>(r / beam);

  StepComparison c;
  for (int64_t p = 0; p < positions; ++p) {
    const auto rows = static_cast<int64_t>(history.size());
    std::vector<int32_t> tokens(static_cast<size_t>(rows)), prefixes, lengths;
    for (int64_t r = 0; r < rows; ++r) {
      tokens[r] = p == 0 ? kBosId : token(rng);
      history[r].push_back(tokens[r]);
      prefixes.insert(prefixes.end(), history[r].begin(), history[r].end());
      lengths.push_back(batch.src_lengths[row_source[r]]);
      Tensor dst = replicated.view({rows * src_len, d}).rows(r * src_len, (r + 1) * src_len);
      copy_tensor(encoded.rows(row_source[r] * src_len, (row_source[r] + 1) * src_len), dst);
    }
    std::vector<float> got = host_floats(decoder.step(tokens, p));
    std::vector<float> want = host_floats(model.decode_last_logits(
        replicated.view({rows * src_len, d}), lengths, src_len, prefixes, rows, p + 1));
    compare(got, want, rows, vocab, c);
    c.incremental.insert(c.incremental.end(), got.begin(), got.end());
    c.full.insert(c.full.end(), want.begin(), want.end());
    ++c.steps;

    std::vector<int32_t> parents;
    if (p == 3) parents = {1, 1, 2, 3, 5, 4};  // inside each source: duplicates and a swap
    if (p == 5) parents = {1, 0, 5, 5};        // the middle source (rows 2, 3) finishes
    if (parents.empty()) continue;
    std::vector<std::vector<int32_t>> next_history;
    std::vector<int32_t> next_source;
    for (int32_t parent : parents) {
      next_history.push_back(history[parent]);
      next_source.push_back(row_source[parent]);
    }
    history = std::move(next_history);
    row_source = std::move(next_source);
    decoder.reorder(parents);
  }
  return c;
}

}  // namespace nmt::test
