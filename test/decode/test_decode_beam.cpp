// Beam search: the length penalty and length limit by hand, option errors, beam 1 against greedy
// decoding (test/support/decode/) token for token, and on a model trained on the reversal task:
// beam 4 at least as accurate as greedy, n-best lists sorted and scored as documented, and results
// that do not depend on how a small plan splits the work.
#include <cmath>
#include <memory>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode.h"
#include "engine/model/model_shape.h"
#include "engine/train/synthetic_reverse.h"
#include "kernels/elementwise.h"
#include "test/decode/decode_test_util.h"
#include "test/support/catch.h"
#include "test/support/decode/greedy_decode.h"

namespace {

using nmt::test::contains;
using nmt::test::error_of;

const nmt::RunConfig& config() {
  static const nmt::RunConfig cfg = nmt::test::reverse_config();
  return cfg;
}

using nmt::test::reverse_data;

// A model with the reverse task's shape and the given plan: trained weights from the shared
// checkpoint, or a fresh initialisation.
std::unique_ptr<nmt::Transformer> reverse_model(int64_t max_rows, int64_t max_len, bool trained) {
  auto model = std::make_unique<nmt::Transformer>(
      nmt::model_shape_from(config().model, reverse_data().vocab()), nmt::Device::cpu, max_rows,
      max_len);
  if (trained)
    nmt::load_model_weights(nmt::test::trained_reverse_checkpoint(), model->params());
  else
    model->params().initialize(11);
  return model;
}

std::vector<int32_t> reversed(const std::vector<int32_t>& s) {
  return {s.rbegin(), s.rend()};
}

}  // namespace

TEST_CASE("length penalty: GNMT's ((5 + |Y|) / 6)^alpha by hand", "[decode]") {
  CHECK(nmt::length_penalty(1, 0.6) == Approx(1.0));
  CHECK(nmt::length_penalty(7, 0.6) == Approx(1.515716566510398));   // 2^0.6
  CHECK(nmt::length_penalty(13, 0.6) == Approx(1.933182044931763));  // 3^0.6
  CHECK(nmt::length_penalty(4, 1.0) == Approx(1.5));
  CHECK(nmt::length_penalty(40, 0.0) == 1.0);
}

TEST_CASE("target length limit: floor(a * n + b), bounded by the model's plan", "[decode]") {
  auto model = reverse_model(512, 64, false);
  nmt::BeamOptions o;  // beam 4, a 1.5, b 10
  CHECK(nmt::max_target_tokens(o, 4, *model) == 16);
  CHECK(nmt::max_target_tokens(o, 5, *model) == 17);   // floor(17.5)
  CHECK(nmt::max_target_tokens(o, 60, *model) == 63);  // bos + 63 tokens = max_len
  o.beam = 32;
  CHECK(nmt::max_target_tokens(o, 4, *model) == 15);  // 32 prefixes of 16 = 512 rows
  o.beam = 1;
  o.max_len_a = 0;
  o.max_len_b = 0;
  CHECK(nmt::max_target_tokens(o, 4, *model) == 0);
}

TEST_CASE("out-of-range beam options are errors naming the option", "[decode]") {
  auto model = reverse_model(64, 16, false);
  auto error = [&](nmt::BeamOptions o) { return error_of([&] { nmt::BeamSearch(*model, o); }); };
  nmt::BeamOptions o;
  CHECK(error(o).empty());
  o.beam = 0;
  CHECK(contains(error(o), "beam: must be at least 1"));
  o = {};
  o.alpha = -0.5;
  CHECK(contains(error(o), "alpha"));
  o = {};
  o.max_len_a = std::nan("");
  CHECK(contains(error(o), "max-len-a"));
  o = {};
  o.max_len_b = -1;
  CHECK(contains(error(o), "max-len-b"));
}

TEST_CASE("beam 1 reproduces greedy_decode token for token", "[decode]") {
  bool trained = GENERATE(false, true);
  INFO((trained ? "trained model" : "untrained model: long outputs up to the limit"));
  auto model = reverse_model(512, 32, trained);
  const int64_t max_new = 14;
  nmt::BeamOptions o;
  o.beam = 1;
  o.max_len_a = 0;
  o.max_len_b = max_new;
  nmt::BeamSearch search(*model, o);
  int64_t compared = 0, at_limit = 0;
  for (const nmt::Batch& batch : reverse_data().dev_batches(16)) {
    auto greedy = nmt::test::greedy_decode(*model, batch, max_new);
    auto beam = search.search(batch);
    REQUIRE(beam.size() == greedy.size());
    for (size_t i = 0; i < greedy.size(); ++i, ++compared) {
      REQUIRE(beam[i].size() == 1);
      CHECK(beam[i][0].tokens == greedy[i]);
      at_limit += static_cast<int64_t>(greedy[i].size()) == max_new ? 1 : 0;
    }
  }
  CHECK(compared == static_cast<int64_t>(reverse_data().dev_sources().size()));
  if (!trained) CHECK(at_limit > 0);  // the forced-eos path is exercised
}

TEST_CASE("trained on reversal: beam 4 beats or ties greedy; n-best lists sorted and scored",
          "[decode]") {
  auto model = reverse_model(512, 32, true);
  nmt::BeamOptions o;  // beam 4, alpha 0.6
  nmt::BeamSearch search(*model, o);
  int64_t greedy_exact = 0, beam_exact = 0, sentences = 0;
  for (const nmt::Batch& batch : reverse_data().dev_batches(16)) {
    int64_t longest = *std::max_element(batch.src_lengths.begin(), batch.src_lengths.end());
    auto greedy =
        nmt::test::greedy_decode(*model, batch, nmt::max_target_tokens(o, longest, *model));
    auto nbest = search.search(batch);
    for (int64_t i = 0; i < batch.sentences; ++i, ++sentences) {
      std::vector<int32_t> source(batch.src.begin() + i * batch.src_len,
                                  batch.src.begin() + i * batch.src_len + batch.src_lengths[i]);
      greedy_exact += greedy[i] == reversed(source) ? 1 : 0;
      const auto& list = nbest[i];
      REQUIRE(!list.empty());
      REQUIRE(list.size() <= 4);
      beam_exact += list.front().tokens == reversed(source) ? 1 : 0;
      for (size_t k = 0; k < list.size(); ++k) {
        const nmt::Hypothesis& h = list[k];
        auto length = static_cast<int64_t>(h.tokens.size());
        CHECK(length <= nmt::max_target_tokens(o, batch.src_lengths[i], *model));
        CHECK(h.log_prob <= 0);
        CHECK(h.score == Approx(h.log_prob / nmt::length_penalty(length + 1, o.alpha)));
        if (k > 0) CHECK(list[k - 1].score >= h.score);
      }
    }
  }
  INFO("greedy exact " << greedy_exact << ", beam exact " << beam_exact << " of " << sentences);
  CHECK(greedy_exact * 10 >= sentences * 7);  // the model did learn the task
  CHECK(beam_exact >= greedy_exact);
}

TEST_CASE("a small plan splits the work without changing the results", "[decode]") {
  auto roomy = reverse_model(1024, 32, true);
  // 96 rows: one sentence of beam 4 with 23-token prefixes per group, the longest it may need.
  auto tight = reverse_model(96, 24, true);
  nmt::BeamOptions o;
  REQUIRE(nmt::max_target_tokens(o, 8, *tight) == nmt::max_target_tokens(o, 8, *roomy));
  const auto& sources = reverse_data().dev_sources();
  auto all = nmt::BeamSearch(*roomy, o).search(sources);
  auto one_by_one = nmt::BeamSearch(*tight, o).search(sources);
  REQUIRE(all.size() == sources.size());
  REQUIRE(one_by_one.size() == sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    CHECK(all[i].front().tokens == one_by_one[i].front().tokens);
    CHECK(all[i].front().score == Approx(one_by_one[i].front().score).margin(1e-6));
  }
}

TEST_CASE("empty sources pass through; a source beyond the plan is named", "[decode]") {
  auto model = reverse_model(128, 16, false);
  nmt::BeamSearch search(*model, nmt::BeamOptions{});
  auto out = search.search(std::vector<std::vector<int32_t>>{{}, {5, 6, 7}});
  REQUIRE(out.size() == 2);
  REQUIRE(out[0].size() == 1);
  CHECK(out[0][0].tokens.empty());
  CHECK(!out[1].empty());
  std::vector<std::vector<int32_t>> sources{{5, 6}, std::vector<int32_t>(20, 7)};
  std::string message = error_of([&] { search.search(sources); });
  CHECK(contains(message, "source 1: 20 tokens"));
}

TEST_CASE("the GPU's decode cache scale: the largest that takes at most half the free memory",
          "[decode]") {
  const size_t unit = 100;  // bytes of the caches at scale 1
  CHECK(nmt::device_cache_scale(unit, 800) == nmt::kDeviceCacheScale);
  CHECK(nmt::device_cache_scale(unit, 799) == 2);
  CHECK(nmt::device_cache_scale(unit, 400) == 2);
  CHECK(nmt::device_cache_scale(unit, 399) == 1);
  CHECK(nmt::device_cache_scale(unit, 0) == 1);  // the runtime could not tell: the old plan
}

TEST_CASE("a diverged model's NaN logits still give one hypothesis per source", "[decode]") {
  auto model = reverse_model(512, 32, false);
  nmt::Tensor master = model->params().master();
  std::vector<float> nans(static_cast<size_t>(master.numel()), NAN);
  nmt::Tensor host(nans.data(), nmt::DType::f32, nmt::Device::cpu, {master.numel()});
  nmt::copy_tensor(host, master);
  model->params().sync_compute();
  const auto& sources = reverse_data().dev_sources();
  for (int64_t beam : {int64_t{1}, int64_t{4}}) {
    nmt::BeamOptions o;
    o.beam = beam;
    auto found = nmt::BeamSearch(*model, o).search(sources);
    REQUIRE(found.size() == sources.size());
    for (const auto& list : found) CHECK(!list.empty());
  }
}

TEST_CASE("block padding: settled sentences' rows stepped on, the same hypotheses to the bit",
          "[decode]") {
  auto model = reverse_model(1024, 32, true);
  const auto& sources = reverse_data().dev_sources();
  for (int64_t beam : {int64_t{1}, int64_t{3}}) {
    INFO("beam " << beam);
    nmt::BeamOptions o;
    o.beam = beam;
    nmt::BeamSearch plain(*model, o), padded(*model, o);
    CHECK(!plain.block_padding());  // on the CPU the decoder replays no graphs
    padded.set_block_padding(true);
    auto want = plain.search(sources);
    auto got = padded.search(sources);
    CHECK(plain.padding_rows() == 0);
    CHECK(padded.padding_rows() > 0);  // sentences settled while others went on
    CHECK(padded.stepped_rows() > plain.stepped_rows());
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      REQUIRE(got[i].size() == want[i].size());
      for (size_t k = 0; k < want[i].size(); ++k) {
        CHECK(got[i][k].tokens == want[i][k].tokens);
        CHECK(got[i][k].log_prob == want[i][k].log_prob);
        CHECK(got[i][k].score == want[i][k].score);
      }
    }
  }
}

TEST_CASE("block padding's count: 1, 2, 3, 4, 6, 8, 12, ..., none past the graphs' rows",
          "[decode]") {
  const int64_t rows = 4096;
  CHECK(nmt::padded_block_count(1, 9, 1, rows) == 1);
  CHECK(nmt::padded_block_count(5, 9, 1, rows) == 6);
  CHECK(nmt::padded_block_count(7, 9, 1, rows) == 8);
  CHECK(nmt::padded_block_count(9, 9, 1, rows) == 9);  // never more than the batch holds
  CHECK(nmt::padded_block_count(13, 40, 4, rows) == 16);
  CHECK(nmt::padded_block_count(17, 40, 4, rows) == 24);
  CHECK(nmt::padded_block_count(25, 40, 4, rows) == 32);
  CHECK(nmt::padded_block_count(700, 1000, 1, rows) == 768);
  CHECK(nmt::padded_block_count(700, 1000, 4, rows) == 768);    // 3072 rows: a graph replays them
  CHECK(nmt::padded_block_count(900, 1100, 4, rows) == 1024);   // 4096 rows: still a graph
  CHECK(nmt::padded_block_count(1100, 1200, 4, rows) == 1100);  // 1200 * 4 > 4096: compact
}
