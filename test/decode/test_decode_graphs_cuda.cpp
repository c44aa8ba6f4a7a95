// IncrementalDecoder on CUDA with its steps replayed from CUDA graphs (engine/decode/step_graphs.h)
// against the same decoder running them op by op: a graph replays the same kernels on the same
// data, so every step's logits agree to the bit, through reorders, rows dropping as sentences end,
// batches above the graph threshold, and positions long past the first capture; the graphs are
// captured and replayed as the policy says; beam search finds the same tokens and scores.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "data/batch.h"
#include "data/special_ids.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode.h"
#include "engine/decode/incremental_decoder.h"
#include "engine/model/host_copy.h"
#include "engine/model/model_shape.h"
#include "engine/train/synthetic_reverse.h"
#include "test/decode/decode_test_util.h"
#include "test/decode/incremental_test_util.h"
#include "test/support/catch.h"

namespace {

// A decoding run scripted independently of its results: the tokens are pseudo-random, and after
// each position `parents` gives the rows that continue (empty: none is reordered).
struct Script {
  std::vector<std::vector<int32_t>> sources;
  // A second batch decoded after the first by the same decoder (none when empty).
  std::vector<std::vector<int32_t>> next_sources;
  int64_t beam = 1, positions = 1;
  std::function<std::vector<int32_t>(int64_t position, int64_t rows)> parents;
};

struct Decoded {
  std::vector<std::vector<float>> logits;  // [steps][rows * vocab]
  nmt::StepGraphStats stats;
};

nmt::Batch batch_of(const std::vector<std::vector<int32_t>>& sources) {
  std::vector<std::vector<int32_t>> no_targets(sources.size());
  std::vector<int64_t> ids(sources.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  return nmt::make_batch(sources, no_targets, ids, 1);
}

Decoded run(nmt::Transformer& model, const Script& script, bool graphs) {
  std::vector<nmt::Batch> batches{batch_of(script.sources)};
  if (!script.next_sources.empty()) batches.push_back(batch_of(script.next_sources));
  nmt::IncrementalCapacity capacity{0, 0, script.positions, 0};
  for (const nmt::Batch& b : batches) {
    capacity.rows = std::max(capacity.rows, b.sentences * script.beam);
    capacity.source_len = std::max(capacity.source_len, b.src_len);
  }
  nmt::IncrementalDecoder decoder(model, capacity);
  decoder.set_graphs(graphs);
  REQUIRE(decoder.graphs() == graphs);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(nmt::kFirstRegularId,
                                               static_cast<int32_t>(model.shape().vocab) - 1);
  Decoded out;
  for (const nmt::Batch& batch : batches) {
    decoder.start(model.encode_sources(batch), batch.src_lengths, batch.src_len, script.beam,
                  script.positions);
    for (int64_t position = 0; position < script.positions && decoder.rows() > 0; ++position) {
      std::vector<int32_t> tokens(static_cast<size_t>(decoder.rows()));
      for (int32_t& t : tokens) t = position == 0 ? nmt::kBosId : token(rng);
      nmt::copy_to_host_f32(decoder.step(tokens, position), out.logits.emplace_back());
      std::vector<int32_t> parents = script.parents(position, decoder.rows());
      if (!parents.empty()) decoder.reorder(parents);
    }
  }
  out.stats = decoder.graph_stats();
  return out;
}

// Beam search's kind of reorder: inside each source's block, duplicates and swaps that change
// with the position.
std::vector<int32_t> shuffled_within_sources(int64_t position, int64_t rows, int64_t beam) {
  std::vector<int32_t> parents;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t block = r / beam, slot = r % beam;
    parents.push_back(
        static_cast<int32_t>(block * beam + (slot * (position + 1) + position) % beam));
  }
  return parents;
}

// The rows of the blocks that stay, dropping `drop` (a block index), as a finished sentence does.
std::vector<int32_t> without_block(int64_t rows, int64_t beam, int64_t drop) {
  std::vector<int32_t> parents;
  for (int64_t r = 0; r < rows; ++r)
    if (r / beam != drop) parents.push_back(static_cast<int32_t>(r));
  return parents;
}

void check_same_bits(const Decoded& graphs, const Decoded& eager) {
  REQUIRE(graphs.logits.size() == eager.logits.size());
  for (size_t step = 0; step < eager.logits.size(); ++step) {
    INFO("step " << step);
    CHECK(graphs.logits[step] == eager.logits[step]);
  }
  INFO("graph failure: " << graphs.stats.failure);
  CHECK(graphs.stats.failure.empty());
  CHECK(eager.stats.captures == 0);
  CHECK(eager.stats.replays == 0);
}

std::unique_ptr<nmt::Transformer> small_model(nmt::DType dtype) {
  return nmt::test::perturbed_model(nmt::Device::cuda, dtype, /*pre_norm=*/true,
                                    /*shared_embeddings=*/true, 3);
}

}  // namespace

TEST_CASE("graph steps on CUDA, batch 1 beam 4: the eager steps' logits to the bit",
          "[decode][cuda][graphs]") {
  nmt::DType dtype = GENERATE(nmt::DType::f32, nmt::DType::bf16);
  INFO(nmt::dtype_name(dtype));
  auto model = small_model(dtype);
  Script script;
  script.sources = {{5, 6, 7, 8, 9, 10, 11}};
  script.beam = 4;
  script.positions = 24;  // captured at position 1, replayed up to 23
  script.parents = [](int64_t p, int64_t rows) { return shuffled_within_sources(p, rows, 4); };
  const Decoded graphs = run(*model, script, true), eager = run(*model, script, false);
  check_same_bits(graphs, eager);
  // One batch shape: the stream's first step eager, the second captured, every later one
  // replayed.
  CHECK(graphs.stats.eager_steps == 1);
  CHECK(graphs.stats.captures == 1);
  CHECK(graphs.stats.replays == 23);
  CHECK(graphs.stats.graph_nodes > 20);
  // Its reorders keep 4 rows: one graph (captured at the first), replayed for the rest.
  CHECK(graphs.stats.reorders.captures == 1);
  CHECK(graphs.stats.reorders.eager == 0);
  CHECK(graphs.stats.reorders.replays > 10);
}

TEST_CASE("graph steps on CUDA, two batch-1 searches: the second captured at its first step",
          "[decode][cuda][graphs]") {
  auto model = small_model(nmt::DType::bf16);
  Script script;
  script.sources = {{5, 6, 7, 8, 9, 10, 11}};
  script.next_sources = {{5, 6, 7}};  // another source length: another key
  script.beam = 4;
  script.positions = 24;
  script.parents = [](int64_t p, int64_t rows) { return shuffled_within_sources(p, rows, 4); };
  const Decoded graphs = run(*model, script, true), eager = run(*model, script, false);
  check_same_bits(graphs, eager);
  REQUIRE(graphs.logits.size() == 48);
  // The stream's first step eager, the first batch captured at its second step, the second
  // batch at its first (a batch's shape lasts; the scratch was reserved up front).
  CHECK(graphs.stats.eager_steps == 1);
  CHECK(graphs.stats.captures == 2);
  CHECK(graphs.stats.replays == 47);
}

TEST_CASE("graph steps on CUDA, batch 3 beam 1, rows dropping: the eager steps' logits",
          "[decode][cuda][graphs]") {
  nmt::DType dtype = GENERATE(nmt::DType::f32, nmt::DType::bf16);
  INFO(nmt::dtype_name(dtype));
  auto model = small_model(dtype);
  Script script;
  script.sources = {{5, 6, 7, 8, 9}, {10, 11, 12}, {13, 14, 15, 16, 17, 18, 19}};
  script.beam = 1;
  script.positions = 20;
  // 3 rows for positions 0-4, 2 rows for 5-9, 1 row for 10-19.
  script.parents = [](int64_t p, int64_t rows) -> std::vector<int32_t> {
    if (p == 4) return without_block(rows, 1, 1);
    if (p == 9) return without_block(rows, 1, 0);
    return {};
  };
  const Decoded graphs = run(*model, script, true), eager = run(*model, script, false);
  check_same_bits(graphs, eager);
  CHECK(graphs.logits.size() == 20);
  // Three batch shapes, each: one eager step, one capture, replays (a shape the batch shrinks to
  // is captured at its second step).
  CHECK(graphs.stats.eager_steps == 3);
  CHECK(graphs.stats.captures == 3);
  CHECK(graphs.stats.replays == 17);
}

TEST_CASE(
    "graph steps on CUDA: above the in-place reorder threshold the swapped caches alternate "
    "between two layouts, each replayed from its graph",
    "[decode][cuda][graphs]") {
  auto model = small_model(nmt::DType::bf16);
  Script script;
  // 17 sources x beam 4 = 68 rows (caches swapped on reorder), 64 after position 4 (in place).
  for (int32_t i = 0; i < 17; ++i)
    script.sources.push_back(std::vector<int32_t>(static_cast<size_t>(1 + i % 6), 5 + i));
  script.beam = 4;
  script.positions = 12;
  script.parents = [](int64_t p, int64_t rows) {
    return p == 4 ? without_block(rows, 4, 5) : shuffled_within_sources(p, rows, 4);
  };
  REQUIRE(17 * 4 > nmt::IncrementalDecoder::kMaxInPlaceReorderRows);
  REQUIRE(16 * 4 <= nmt::IncrementalDecoder::kMaxInPlaceReorderRows);
  REQUIRE(17 * 4 <= nmt::StepGraphs::kMaxRows);
  const Decoded graphs = run(*model, script, true), eager = run(*model, script, false);
  check_same_bits(graphs, eager);
  // 68 rows (the reorder after position 0 keeps every row; those after 1, 2 and 3 swap, so the
  // layouts go A A B A B): 0 eager (the stream's first step), 1 captured (A's second), 2 eager
  // (B's first), 3 replayed (A again), 4 captured (B's second). 64 rows, in place from there: 5
  // eager (a shape the batch shrank to), 6 captured, 7-11 replayed.
  CHECK(graphs.stats.eager_steps == 3);
  CHECK(graphs.stats.captures == 3);
  CHECK(graphs.stats.replays == 9);
}

namespace {

using nmt::test::reverse_data;

// The searches of every source alone (batch 1), then of all of them at once.
std::vector<std::vector<nmt::Hypothesis>> search_all(nmt::Transformer& model, int64_t beam,
                                                     bool graphs, nmt::StepGraphStats& stats) {
  nmt::BeamOptions o;
  o.beam = beam;
  nmt::BeamSearch search(model, o);
  REQUIRE(search.incremental_decoder() != nullptr);
  search.incremental_decoder()->set_graphs(graphs);
  const auto& sources = reverse_data().dev_sources();
  std::vector<std::vector<nmt::Hypothesis>> found;
  for (size_t i = 0; i < sources.size() && i < 12; ++i)
    found.push_back(search.search({sources[i]}).front());
  for (auto& list : search.search(sources)) found.push_back(std::move(list));
  stats = search.incremental_decoder()->graph_stats();
  return found;
}

}  // namespace

TEST_CASE("beam search on CUDA: the same tokens and scores with graphs on and off",
          "[decode][cuda][graphs]") {
  int64_t beam = GENERATE(1, 4);
  INFO("beam " << beam);
  nmt::RunConfig cfg = nmt::test::reverse_config();
  nmt::Transformer model(nmt::model_shape_from(cfg.model, reverse_data().vocab()),
                         nmt::Device::cuda, 1024, 32);
  nmt::load_model_weights(nmt::test::trained_reverse_checkpoint(), model.params());
  nmt::StepGraphStats on_stats, off_stats;
  const auto on = search_all(model, beam, true, on_stats);
  const auto off = search_all(model, beam, false, off_stats);
  REQUIRE(on.size() == off.size());
  for (size_t i = 0; i < off.size(); ++i) {
    INFO("search " << i);
    REQUIRE(on[i].size() == off[i].size());
    for (size_t k = 0; k < off[i].size(); ++k) {
      CHECK(on[i][k].tokens == off[i][k].tokens);
      CHECK(on[i][k].log_prob == off[i][k].log_prob);
      CHECK(on[i][k].score == off[i][k].score);
    }
  }
  INFO("graph failure: " << on_stats.failure);
  CHECK(on_stats.failure.empty());
  CHECK(on_stats.captures > 0);
  CHECK(on_stats.replays > on_stats.captures);
  CHECK(off_stats.replays == 0);
}
