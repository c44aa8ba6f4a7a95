// EvalBatcher: one fixed-order pass, every pair kept with its index, ranks share the batches.
#include <algorithm>
#include <random>

#include "data/batcher_eval.h"
#include "test/data/data_test_util.h"
#include "test/support/catch.h"

using namespace nmt;

namespace {

InMemoryCorpus eval_corpus(int64_t pairs) {
  std::mt19937 rng(21);
  InMemoryCorpus corpus;
  for (int64_t i = 0; i < pairs; ++i) {
    const int32_t s = static_cast<int32_t>(rng() % 60);  // empty sources too: dev keeps them
    const int32_t t = 1 + static_cast<int32_t>(rng() % 60);
    corpus.add(std::vector<int32_t>(s, 4 + static_cast<int32_t>(i % 50)),
               std::vector<int32_t>(t, 5));
  }
  corpus.add(std::vector<int32_t>(700, 9), std::vector<int32_t>(10, 9));  // wider than the budget
  return corpus;
}

std::vector<std::vector<int64_t>> one_pass(EvalBatcher& batcher, int64_t max_tokens) {
  std::vector<std::vector<int64_t>> pass;
  Batch b;
  while (batcher.next(b)) {
    if (b.sentences > 1) REQUIRE(b.sentences * std::max(b.src_len, b.tgt_len) <= max_tokens);
    REQUIRE(b.src_len % 8 == 0);
    pass.push_back(b.ids);
  }
  return pass;
}

}  // namespace

TEST_CASE("eval batcher: every pair once, in a fixed order, ids kept", "[batcher]") {
  const InMemoryCorpus corpus = eval_corpus(500);
  EvalBatcherOptions o;
  o.max_tokens = 512;
  o.sort_by_length = GENERATE(true, false);
  EvalBatcher batcher(corpus, o);
  const auto first = one_pass(batcher, o.max_tokens);
  REQUIRE(static_cast<int64_t>(first.size()) == batcher.batches());
  std::vector<int64_t> all;
  for (const auto& ids : first) all.insert(all.end(), ids.begin(), ids.end());
  if (!o.sort_by_length) REQUIRE(std::is_sorted(all.begin(), all.end()));
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == 501);
  for (int64_t i = 0; i < 501; ++i) REQUIRE(all[i] == i);
  batcher.reset();
  REQUIRE(one_pass(batcher, o.max_tokens) == first);  // the same order on every pass
}

TEST_CASE("eval batcher: ranks take alternate batches and cover the set together", "[batcher]") {
  const InMemoryCorpus corpus = eval_corpus(300);
  std::vector<int64_t> all;
  int64_t total = 0;
  for (int64_t r = 0; r < 3; ++r) {
    EvalBatcherOptions o;
    o.max_tokens = 256;
    o.world_size = 3;
    o.rank = r;
    EvalBatcher batcher(corpus, o);
    total += batcher.batches();
    for (const auto& ids : one_pass(batcher, o.max_tokens))
      all.insert(all.end(), ids.begin(), ids.end());
    if (r == 0) REQUIRE(total >= batcher.total_batches() / 3);
  }
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == 301);
  REQUIRE(std::adjacent_find(all.begin(), all.end()) == all.end());
}
