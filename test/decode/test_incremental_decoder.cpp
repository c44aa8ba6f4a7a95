// IncrementalDecoder on the CPU: every step's logits against Transformer::decode_last_logits on the
// whole prefixes (post- and pre-norm, shared and separate embeddings, with reorders and a source
// dropping out), plan and order errors, and beam search through it against the full-prefix path.
#include <memory>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode.h"
#include "engine/decode/incremental_decoder.h"
#include "engine/model/model_shape.h"
#include "engine/train/synthetic_reverse.h"
#include "test/decode/decode_test_util.h"
#include "test/decode/incremental_test_util.h"
#include "test/support/catch.h"
#include "test/support/decode/full_prefix_decoder.h"

namespace {

using nmt::test::contains;
using nmt::test::error_of;

using nmt::test::reverse_data;

std::unique_ptr<nmt::Transformer> reverse_model(bool trained) {
  nmt::RunConfig cfg = nmt::test::reverse_config();
  auto model = std::make_unique<nmt::Transformer>(
      nmt::model_shape_from(cfg.model, reverse_data().vocab()), nmt::Device::cpu, 512, 32);
  if (trained)
    nmt::load_model_weights(nmt::test::trained_reverse_checkpoint(), model->params());
  else
    model->params().initialize(11);
  return model;
}

}  // namespace

TEST_CASE("incremental steps give decode_last_logits' logits on the whole prefix", "[decode]") {
  bool pre_norm = GENERATE(false, true);
  bool shared = GENERATE(true, false);
  INFO((pre_norm ? "pre-norm" : "post-norm")
       << ", " << (shared ? "shared" : "separate") << " embeddings");
  auto model = nmt::test::perturbed_model(nmt::Device::cpu, nmt::DType::f32, pre_norm, shared, 3);
  nmt::test::StepComparison c = nmt::test::compare_incremental_with_full(*model, 17);
  INFO("max |diff| " << c.max_abs_diff << ", max |logit| " << c.max_abs_logit);
  CHECK(c.steps == 9);
  CHECK(c.rows == 4 * 6 + 2 * 6 + 3 * 4);
  CHECK(c.argmax_agree == c.rows);
  CHECK(c.max_abs_diff <= 1e-5 * std::max(1.0, c.max_abs_logit));
  // The CPU reference sums every product in a fixed order whatever the number of rows, and both
  // paths run the same ops on the same rows: the logits agree to the bit, which is what makes beam
  // 1 reproduce greedy_decode token for token.
  CHECK(c.bit_identical);
}

TEST_CASE("incremental decoder: batches beyond the plan and steps out of order are errors",
          "[decode]") {
  auto model = nmt::test::perturbed_model(nmt::Device::cpu, nmt::DType::f32, false, true, 3);
  nmt::IncrementalDecoder decoder(*model, nmt::IncrementalCapacity{4, 8, 6, 0});
  std::vector<float> memory(2 * 8 * 32, 0.0f);
  nmt::Tensor m(memory.data(), nmt::DType::f32, nmt::Device::cpu, {2 * 8, 32});
  CHECK(contains(error_of([&] { decoder.start(m, {3, 8}, 8, 4, 6); }), "exceed the plan"));
  CHECK(contains(error_of([&] { decoder.start(m, {3, 8}, 8, 2, 7); }), "exceed the plan"));
  CHECK(contains(error_of([&] { decoder.start(m, {3, 9}, 8, 2, 6); }), "source length 9"));
  REQUIRE(error_of([&] { decoder.start(m, {3, 8}, 8, 2, 6); }).empty());
  CHECK(decoder.rows() == 4);
  CHECK(contains(error_of([&] { decoder.step({1, 1, 1, 1}, 1); }), "out of order"));
  CHECK(contains(error_of([&] { decoder.step({1, 1, 1}, 0); }), "3 tokens for 4 rows"));
  REQUIRE(error_of([&] { decoder.step({1, 1, 1, 1}, 0); }).empty());
  CHECK(contains(error_of([&] { decoder.reorder({2, 0, 3, 3}); }), "not a row of its block"));
  CHECK(contains(error_of([&] { decoder.reorder({2, 2, 0, 0}); }), "keep the sources in order"));
  CHECK(contains(error_of([&] { decoder.reorder({0, 1, 2}); }), "not a multiple of beam"));
  REQUIRE(error_of([&] { decoder.reorder({3, 2}); }).empty());
  CHECK(decoder.rows() == 2);
  CHECK(error_of([&] { decoder.step({5, 6}, 1); }).empty());
  CHECK(contains(error_of([&] { nmt::IncrementalDecoder(*model, nmt::IncrementalCapacity{}); }),
                 "must be at least 1"));
}

TEST_CASE("beam search: the incremental decoder finds what the full-prefix path finds",
          "[decode]") {
  bool trained = GENERATE(false, true);
  int64_t beam = GENERATE(1, 4);
  INFO((trained ? "trained" : "untrained") << " model, beam " << beam);
  auto model = reverse_model(trained);
  nmt::BeamOptions o;
  o.beam = beam;
  auto incremental = nmt::BeamSearch(*model, o).search(reverse_data().dev_sources());
  auto full = nmt::BeamSearch(*model, o, std::make_unique<nmt::test::FullPrefixDecoder>(*model))
                  .search(reverse_data().dev_sources());
  REQUIRE(incremental.size() == full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    REQUIRE(incremental[i].size() == full[i].size());
    for (size_t k = 0; k < full[i].size(); ++k) {
      CHECK(incremental[i][k].tokens == full[i][k].tokens);
      CHECK(incremental[i][k].log_prob == full[i][k].log_prob);
    }
  }
}
