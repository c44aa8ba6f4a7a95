// TokenBatcher: coverage per epoch, token budget, padding, determinism, rank slices, resume.
#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "data/batcher.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"

using namespace nmt;
using nmt::test::contains;
using nmt::test::error_of;

namespace {

// Pairs with lengths 1..max_len (target loosely following the source) and ids that encode the pair
// index, so a batch row can be checked against its pair.
InMemoryCorpus synthetic_corpus(int64_t pairs, int32_t max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  InMemoryCorpus corpus;
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t s = 1 + static_cast<int32_t>(rng() % max_len);
    const int32_t t = std::max<int32_t>(1, s + static_cast<int32_t>(rng() % 11) - 5);
    std::vector<int32_t> src(s), tgt(t);
    for (int32_t j = 0; j < s; ++j) src[j] = 4 + static_cast<int32_t>((i * 7 + j) % 1000);
    for (int32_t j = 0; j < t; ++j) tgt[j] = 4 + static_cast<int32_t>((i * 3 + j) % 1000);
    corpus.add(std::move(src), std::move(tgt));
  }
  return corpus;
}

TokenBatcherOptions base_options() {
  TokenBatcherOptions o;
  o.max_tokens = 1024;
  o.max_sentences = 64;
  o.window = 1000;
  o.seed = 11;
  o.max_src_len = 120;
  o.max_tgt_len = 120;
  return o;
}

// Checks a batch against the corpus: rows hold the pair's ids, bos/eos in place, padding after.
void check_batch_content(const Batch& b, const ParallelCorpus& corpus) {
  std::vector<int32_t> src, tgt;
  for (int64_t r = 0; r < b.sentences; ++r) {
    corpus.source(b.ids[r], src);
    corpus.target(b.ids[r], tgt);
    REQUIRE(b.src_lengths[r] == static_cast<int32_t>(src.size()));
    REQUIRE(std::equal(src.begin(), src.end(), b.src.begin() + r * b.src_len));
    REQUIRE(b.tgt_in[r * b.tgt_len] == kBosId);
    REQUIRE(b.tgt_out[r * b.tgt_len + static_cast<int64_t>(tgt.size())] == kEosId);
    REQUIRE(std::equal(tgt.begin(), tgt.end(), b.tgt_out.begin() + r * b.tgt_len));
  }
}

std::vector<std::vector<int64_t>> schedule_ids(TokenBatcher& batcher, int64_t steps) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = 0; s < steps; ++s) out.push_back(batcher.next().ids);
  return out;
}

}  // namespace

TEST_CASE("batcher: every pair exactly once per epoch, epochs roll over", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(3000, 100, 1);
  TokenBatcher batcher(corpus, base_options());
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    REQUIRE(batcher.epoch() == epoch);
    REQUIRE(batcher.position().batch == 0);
    const int64_t steps = batcher.batches_per_epoch();
    std::vector<int> seen(corpus.size(), 0);
    for (int64_t s = 0; s < steps; ++s) {
      const Batch b = batcher.next();
      for (int64_t id : b.ids) ++seen[id];
    }
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
  REQUIRE(batcher.epoch() == 3);
}

TEST_CASE("batcher: token budget, sentence cap and padding to multiples of 8", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(2000, 100, 2);
  TokenBatcherOptions o = base_options();
  o.max_sentences = GENERATE(int64_t{0}, int64_t{16});
  TokenBatcher batcher(corpus, o);
  int64_t real_tokens = 0, padded_tokens = 0;
  const int64_t steps = batcher.batches_per_epoch();
  for (int64_t s = 0; s < steps; ++s) {
    const Batch b = batcher.next();
    REQUIRE(b.src_len % 8 == 0);
    REQUIRE(b.tgt_len % 8 == 0);
    REQUIRE(b.sentences * std::max(b.src_len, b.tgt_len) <= o.max_tokens);
    if (o.max_sentences > 0) REQUIRE(b.sentences <= o.max_sentences);
    check_batch_content(b, corpus);
    real_tokens += b.tgt_tokens();
    padded_tokens += b.sentences * b.tgt_len;
  }
  // Length bucketing keeps padding small.
  REQUIRE(static_cast<double>(real_tokens) / static_cast<double>(padded_tokens) > 0.8);
}

TEST_CASE("batcher: same seed, same schedule; another seed, another", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(1500, 60, 3);
  TokenBatcherOptions o = base_options();
  TokenBatcher a(corpus, o), b(corpus, o);
  const int64_t steps = 2 * a.batches_per_epoch() + 3;
  const auto first = schedule_ids(a, steps);
  REQUIRE(first == schedule_ids(b, steps));
  o.seed = 12;
  TokenBatcher c(corpus, o);
  REQUIRE(first != schedule_ids(c, steps));
}

TEST_CASE("batcher: rank slices partition the global batch with balanced tokens", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(4001, 100, 4);
  const int64_t world = 4;
  std::vector<TokenBatcher> ranks;
  for (int64_t r = 0; r < world; ++r) {
    TokenBatcherOptions o = base_options();
    o.world_size = world;
    o.rank = r;
    ranks.emplace_back(corpus, o);
  }
  const int64_t steps = ranks[0].batches_per_epoch();
  std::vector<int> seen(corpus.size(), 0);
  double worst_spread = 0;
  for (int64_t s = 0; s < steps; ++s) {
    int64_t global_tgt = 0, global_all = 0, largest = 0, smallest = INT64_MAX;
    std::set<int64_t> step_ids;
    for (auto& batcher : ranks) {
      REQUIRE(batcher.batches_per_epoch() == steps);
      const Batch b = batcher.next();
      REQUIRE(b.sentences * std::max(b.src_len, b.tgt_len) <= batcher.options().max_tokens);
      for (int64_t id : b.ids) {
        REQUIRE(step_ids.insert(id).second);  // no pair on two ranks
        ++seen[id];
      }
      global_tgt += b.tgt_tokens();
      global_all += b.src_tokens() + b.tgt_tokens();
      largest = std::max(largest, b.src_tokens() + b.tgt_tokens());
      smallest = std::min(smallest, b.src_tokens() + b.tgt_tokens());
      REQUIRE(batcher.last_global().sentences == ranks[0].last_global().sentences);
    }
    REQUIRE(ranks[0].last_global().tgt_tokens == global_tgt);
    REQUIRE(ranks[0].last_global().sentences == static_cast<int64_t>(step_ids.size()));
    if (ranks[0].last_global().sentences >= 16 * world)
      worst_spread = std::max(worst_spread, static_cast<double>(largest - smallest) /
                                                (static_cast<double>(global_all) / world));
  }
  // Source + target tokens of the most and least loaded rank, relative to the mean.
  INFO("worst per-step token spread between ranks: " << worst_spread);
  REQUIRE(worst_spread < 0.02);
  // Everything but the epoch's remainder (< world_size pairs) was used exactly once.
  const int64_t left_out = ranks[0].stats().epoch_remainder;
  REQUIRE(left_out < world);
  REQUIRE(std::count(seen.begin(), seen.end(), 1) == corpus.size() - left_out);
  REQUIRE(std::count(seen.begin(), seen.end(), 0) == left_out);
}

TEST_CASE("batcher: resume from a saved position gives the identical next batches", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(1200, 80, 5);
  const TokenBatcherOptions o = base_options();
  TokenBatcher original(corpus, o);
  const int64_t per_epoch = original.batches_per_epoch();
  const int64_t stop = GENERATE_COPY(int64_t{0}, int64_t{5}, per_epoch, per_epoch + 3);
  for (int64_t s = 0; s < stop; ++s) original.next();

  const nlohmann::json saved = original.position();
  const std::string text = saved.dump();
  TokenBatcherOptions other_seed = o;
  other_seed.seed = 999;  // the position's rng key wins over the seed option
  TokenBatcher resumed(corpus, other_seed);
  resumed.restore(nlohmann::json::parse(text).get<BatcherPosition>());
  REQUIRE(resumed.epoch() == original.epoch());
  for (int64_t s = 0; s < 2 * per_epoch + 2; ++s) {
    const Batch a = original.next();
    const Batch b = resumed.next();
    REQUIRE(a.ids == b.ids);
    REQUIRE(a.src == b.src);
    REQUIRE(a.tgt_out == b.tgt_out);
  }
  REQUIRE(original.position().rng == resumed.position().rng);
}

TEST_CASE("batcher: restore refuses another corpus or other options", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(500, 50, 6);
  TokenBatcher batcher(corpus, base_options());
  const BatcherPosition position = batcher.position();

  const InMemoryCorpus smaller = synthetic_corpus(499, 50, 6);
  TokenBatcher other(smaller, base_options());
  REQUIRE(contains(error_of([&] { other.restore(position); }), "corpus of 500 pairs"));
  TokenBatcherOptions o = base_options();
  o.max_tokens = 2048;
  TokenBatcher wider(corpus, o);
  REQUIRE(contains(error_of([&] { wider.restore(position); }), "different batching options"));

  nlohmann::json broken = position;
  broken.erase("rng");
  REQUIRE(contains(error_of([&] { broken.get<BatcherPosition>(); }), "missing key 'rng'"));
  broken = position;
  broken["rng"] = 12;
  REQUIRE(contains(error_of([&] { broken.get<BatcherPosition>(); }), "'rng'"));
}

TEST_CASE("batcher: drop and truncate policies for over-long pairs", "[batcher]") {
  InMemoryCorpus corpus;
  for (int i = 0; i < 20; ++i) corpus.add(std::vector<int32_t>(10, 5), std::vector<int32_t>(12, 6));
  corpus.add(std::vector<int32_t>(50, 5), std::vector<int32_t>(10, 6));  // source too long
  corpus.add(std::vector<int32_t>(10, 5), std::vector<int32_t>(40, 6));  // target too long
  corpus.add({}, std::vector<int32_t>(3, 6));                            // empty source
  TokenBatcherOptions o = base_options();
  o.max_src_len = 32;
  o.max_tgt_len = 32;

  o.length_policy = LengthPolicy::kDrop;
  TokenBatcher dropping(corpus, o);
  REQUIRE(dropping.stats().dropped_too_long == 2);
  REQUIRE(dropping.stats().dropped_empty == 1);
  REQUIRE(dropping.stats().usable == 20);

  o.length_policy = LengthPolicy::kTruncate;
  TokenBatcher truncating(corpus, o);
  REQUIRE(truncating.stats().truncated == 2);
  REQUIRE(truncating.stats().usable == 22);
  std::set<int64_t> seen;
  const int64_t steps = truncating.batches_per_epoch();
  for (int64_t s = 0; s < steps; ++s) {
    const Batch b = truncating.next();
    for (int64_t r = 0; r < b.sentences; ++r) {
      seen.insert(b.ids[r]);
      REQUIRE(b.src_lengths[r] <= 32);
      REQUIRE(b.tgt_lengths[r] <= 33);
    }
  }
  REQUIRE(seen.count(20) == 1);
  REQUIRE(seen.count(21) == 1);
  REQUIRE(parse_length_policy("truncate") == LengthPolicy::kTruncate);
  REQUIRE(contains(error_of([] { parse_length_policy("cut"); }), "'cut'"));
}

TEST_CASE("batcher: options that cannot work are refused with a reason", "[batcher]") {
  const InMemoryCorpus corpus = synthetic_corpus(10, 20, 7);
  TokenBatcherOptions o = base_options();
  o.max_tokens = 64;  // cannot hold a 120-token pair
  REQUIRE(contains(error_of([&] { TokenBatcher b(corpus, o); }), "max_tokens 64"));
  o = base_options();
  o.world_size = 2;
  o.rank = 2;
  REQUIRE(contains(error_of([&] { TokenBatcher b(corpus, o); }), "rank 2"));
  o = base_options();
  o.world_size = 16;
  o.rank = 0;
  REQUIRE(contains(error_of([&] { TokenBatcher b(corpus, o); }), "fewer than world_size"));
}

TEST_CASE("add_row_orders groups each side's rows by id, stably, pad rows last", "[batch]") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(kFirstRegularId, 60);
  std::vector<std::vector<int32_t>> src(40), tgt(40);
  std::vector<int64_t> ids(40);
  for (int i = 0; i < 40; ++i) {
    src[static_cast<size_t>(i)].resize(static_cast<size_t>(1 + i % 13));
    tgt[static_cast<size_t>(i)].resize(static_cast<size_t>(1 + i % 7));
    for (int32_t& v : src[static_cast<size_t>(i)]) v = id(rng);
    for (int32_t& v : tgt[static_cast<size_t>(i)]) v = id(rng);
    ids[static_cast<size_t>(i)] = i;
  }
  Batch batch = make_batch(src, tgt, ids, 8);
  CHECK(batch.src_order.empty());  // only where asked for
  batch.src[3] = -5;               // a negative id is ordered as pad
  add_row_orders(batch);
  for (const auto* side : {&batch.src, &batch.tgt_in}) {
    const std::vector<int32_t>& order = side == &batch.src ? batch.src_order : batch.tgt_order;
    const size_t n = side->size();
    REQUIRE(order.size() == 2 * n);
    // The reference: (key, row) pairs sorted, so equal keys keep their row order.
    std::vector<std::pair<int32_t, int32_t>> expected;
    for (size_t r = 0; r < n; ++r) {
      const int32_t v = (*side)[r];
      expected.emplace_back(v == kPadId || v < 0 ? kOrderPadKey : v, static_cast<int32_t>(r));
    }
    std::sort(expected.begin(), expected.end());
    size_t pads = 0;
    for (size_t i = 0; i < n; ++i) {
      INFO((side == &batch.src ? "src" : "tgt_in") << " position " << i);
      CHECK(order[i] == expected[i].first);
      CHECK(order[n + i] == expected[i].second);
      pads += order[i] == kOrderPadKey ? 1 : 0;
    }
    CHECK(pads > 0);
  }
  // All pad (no real id): every row keyed as pad, in row order.
  Batch empty;
  empty.src.assign(8, kPadId);
  empty.tgt_in.assign(8, kPadId);
  add_row_orders(empty);
  for (size_t i = 0; i < 8; ++i) {
    CHECK(empty.src_order[i] == kOrderPadKey);
    CHECK(empty.src_order[8 + i] == static_cast<int32_t>(i));
  }
}

TEST_CASE("add_row_orders sorts ids far above the batch's size without a table that large",
          "[batch]") {
  Batch batch;
  batch.src = {7, 2000000000, kPadId, 7, 5, -3, 2000000000, 5};
  batch.tgt_in = {kPadId, 9};
  add_row_orders(batch);
  const std::vector<int32_t> expected = {
      5, 5, 7, 7, 2000000000, 2000000000, kOrderPadKey, kOrderPadKey, 4, 7, 0, 3, 1, 6, 2, 5};
  CHECK(batch.src_order == expected);
  CHECK(batch.tgt_order == std::vector<int32_t>{9, kOrderPadKey, 1, 0});
}
