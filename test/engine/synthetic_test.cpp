// The synthetic reversal task: reversed targets, disjoint held-out set, deterministic batches.
#include <set>

#include "engine/train/synthetic_reverse.h"
#include "test/support/catch.h"

TEST_CASE("synthetic:reverse batches are reversals, deterministic, and disjoint from held-out",
          "[engine][data]") {
  nmt::DataConfig cfg;
  cfg.train = "synthetic:reverse";
  cfg.synthetic_train_pairs = 2000;
  cfg.synthetic_dev_pairs = 100;
  nmt::SyntheticReverse data(cfg, 5, 512, 0);
  nmt::Batch a = data.train_batch(3), b = data.train_batch(3), c = data.train_batch(4);
  CHECK(a.src == b.src);
  CHECK(a.src != c.src);
  CHECK(a.src_len % 8 == 0);
  CHECK(a.sentences * a.src_len <= 512);
  for (int64_t i = 0; i < a.sentences; ++i) {
    int32_t n = a.src_lengths[i];
    REQUIRE(a.tgt_lengths[i] == n + 1);
    for (int32_t j = 0; j < n; ++j) CHECK(a.tgt_out[i * a.tgt_len + j] == a.src[i * a.src_len + n - 1 - j]);
    CHECK(a.tgt_out[i * a.tgt_len + n] == nmt::kEosId);
    CHECK(a.tgt_in[i * a.tgt_len] == nmt::kBosId);
  }
  std::set<std::vector<int32_t>> held(data.dev_sources().begin(), data.dev_sources().end());
  for (int64_t k = 0; k < 20; ++k) {
    nmt::Batch t = data.train_batch(k);
    for (int64_t i = 0; i < t.sentences; ++i) {
      std::vector<int32_t> s(t.src.begin() + i * t.src_len, t.src.begin() + i * t.src_len + t.src_lengths[i]);
      CHECK(held.count(s) == 0);
    }
  }
}

TEST_CASE("synthetic:reverse splits a global batch evenly over ranks", "[engine][data]") {
  nmt::DataConfig cfg;
  cfg.synthetic_train_pairs = 1000;
  cfg.synthetic_dev_pairs = 50;
  nmt::SyntheticReverse whole(cfg, 9, 1024, 0, 1, 0);
  nmt::SyntheticReverse r0(cfg, 9, 1024, 0, 2, 0), r1(cfg, 9, 1024, 0, 2, 1);
  nmt::Batch w = whole.train_batch(2), a = r0.train_batch(2), b = r1.train_batch(2);
  CHECK(a.sentences + b.sentences == w.sentences);
  std::vector<int64_t> ids = a.ids;
  ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  CHECK(ids == w.ids);
}

TEST_CASE("synthetic:reverse counts a global batch's target tokens over exactly the ranks' slices",
          "[engine][data]") {
  nmt::DataConfig cfg;
  cfg.train = "synthetic:reverse";
  cfg.synthetic_train_pairs = 500;
  cfg.synthetic_dev_pairs = 10;
  // 512 tokens / 16 (padded length) = 32 sentences, not a multiple of 3 ranks: 30 are used.
  for (int world : {1, 2, 3}) {
    INFO("world " << world);
    for (int64_t index : {0, 7}) {
      int64_t sum = 0;
      for (int rank = 0; rank < world; ++rank)
        sum += nmt::SyntheticReverse(cfg, 9, 512, 0, world, rank).train_batch(index).tgt_tokens();
      CHECK(nmt::SyntheticReverse(cfg, 9, 512, 0, world, 0).global_tgt_tokens(index) == sum);
    }
  }
}
