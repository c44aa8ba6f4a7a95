// PrefetchedData (engine/train/prefetched_data.h): the batches, and the tokens, epoch and position
// read after each, are the wrapped source's own, over many steps and across restore(); an
// exception building batch k comes out of the k-th next_train(); the dev accessors wait for the
// batch being built, so the inner source is never used from two threads at once.
#include "engine/train/prefetched_data.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/train/training_data.h"
#include "test/support/catch.h"
#include "test/support/tiny_run_config.h"

namespace {

// Batch n (0-based) holds n in its fields; the position is the live count of batches built, the
// epoch rolls over every 7 batches and the tokens vary per batch, so a state read one batch late
// or early shows. Counts overlapping calls (from two threads), which must stay 0.
class FakeData : public nmt::TrainingData {
 public:
  int64_t throw_at = -1;               // building this batch throws once (no advance)
  std::chrono::milliseconds delay{0};  // each next_train sleeps this long
  std::atomic<int64_t> started{0};     // next_train calls begun
  std::atomic<int64_t> finished{0};    // next_train calls returned or thrown
  mutable std::atomic<int> overlaps{0};

  int64_t vocab_size() const override {
    guard();
    return 11;
  }
  int64_t max_padded_len() const override {
    guard();
    return 16;
  }
  nmt::Batch next_train() override {
    ++started;
    Finish finish{finished};  // counts after busy is released
    Busy busy(*this);
    std::this_thread::sleep_for(delay);
    if (next_ == throw_at) {
      throw_at = -1;
      throw std::runtime_error("batch " + std::to_string(next_) + " is broken");
    }
    nmt::Batch b;
    b.sentences = 1;
    b.src_len = b.tgt_len = 8;
    b.src.assign(8, static_cast<int32_t>(next_));
    b.tgt_in.assign(8, static_cast<int32_t>(2 * next_));
    b.tgt_out.assign(8, static_cast<int32_t>(3 * next_));
    b.src_lengths = {static_cast<int32_t>(next_ % 8)};
    b.tgt_lengths = {static_cast<int32_t>(next_ % 5)};
    b.ids = {next_};
    tokens_ = 100 + (next_ * 37) % 23;
    ++next_;
    return b;
  }
  int64_t last_global_tgt_tokens() const override {
    guard();
    return tokens_;
  }
  int64_t epoch() const override {
    guard();
    return next_ / 7;
  }
  nlohmann::json position() const override {
    guard();
    return {{"batch", next_}};
  }
  void restore(const nlohmann::json& position) override {
    Busy busy(*this);
    next_ = position.at("batch").get<int64_t>();
    tokens_ = 0;
  }
  int64_t dev_pairs() const override {
    guard();
    return 3;
  }
  void dev_pair(int64_t i, std::vector<int32_t>& source,
                std::vector<int32_t>& target) const override {
    Busy busy(*this);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    source = {static_cast<int32_t>(i)};
    target = {static_cast<int32_t>(i), static_cast<int32_t>(i)};
  }
  const std::vector<std::string>& dev_references() const override {
    guard();
    return refs_;
  }
  const std::vector<std::string>& dev_sources_text() const override {
    guard();
    return refs_;
  }
  std::string describe() const override {
    guard();
    return "fake";
  }

 private:
  struct Finish {
    ~Finish() { ++count; }
    std::atomic<int64_t>& count;
  };
  // Marks a call in progress; a second one meanwhile counts an overlap.
  struct Busy {
    explicit Busy(const FakeData& d) : data(d) {
      if (data.busy_.exchange(true)) ++data.overlaps;
    }
    ~Busy() { data.busy_.store(false); }
    const FakeData& data;
  };
  void guard() const {
    if (busy_.load()) ++overlaps;
  }

  int64_t next_ = 0, tokens_ = 0;
  std::vector<std::string> refs_{"a", "b", "c"};
  mutable std::atomic<bool> busy_{false};
};

void check_same(const nmt::Batch& a, const nmt::Batch& b) {
  CHECK(a.sentences == b.sentences);
  CHECK(a.src_len == b.src_len);
  CHECK(a.tgt_len == b.tgt_len);
  CHECK(a.src == b.src);
  CHECK(a.tgt_in == b.tgt_in);
  CHECK(a.tgt_out == b.tgt_out);
  CHECK(a.src_lengths == b.src_lengths);
  CHECK(a.tgt_lengths == b.tgt_lengths);
  CHECK(a.ids == b.ids);
}

// `steps` batches from each: the same batches, and after each the same tokens, epoch, position.
void check_same_stream(nmt::TrainingData& wrapped, nmt::TrainingData& plain, int steps) {
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s);
    check_same(wrapped.next_train(), plain.next_train());
    CHECK(wrapped.last_global_tgt_tokens() == plain.last_global_tgt_tokens());
    CHECK(wrapped.epoch() == plain.epoch());
    CHECK(wrapped.position() == plain.position());
  }
}

// Until `count` (FakeData::started or ::finished) reaches `n`.
void wait_until(const std::atomic<int64_t>& count, int64_t n) {
  while (count.load() < n) std::this_thread::yield();
}

}  // namespace

TEST_CASE("PrefetchedData: the batches and the state after each are the source's own",
          "[engine][data][prefetch]") {
  auto inner = std::make_unique<FakeData>();
  FakeData* fake = inner.get();
  nmt::PrefetchedData wrapped(std::move(inner));
  FakeData plain;
  // Before the first batch the state is the source's.
  CHECK(wrapped.position() == plain.position());
  CHECK(wrapped.epoch() == plain.epoch());
  for (int64_t s = 0; s < 50; ++s) {
    INFO("step " << s);
    check_same(wrapped.next_train(), plain.next_train());
    // Every other step, read once the worker has built the next batch (the inner source's live
    // state is then one batch on), else while it may be building it.
    if (s % 2 == 0) wait_until(fake->finished, s + 2);
    CHECK(wrapped.last_global_tgt_tokens() == plain.last_global_tgt_tokens());
    CHECK(wrapped.epoch() == plain.epoch());
    CHECK(wrapped.position() == plain.position());
  }
  CHECK(wrapped.position() == nlohmann::json{{"batch", 50}});
  CHECK(fake->overlaps.load() == 0);
}

TEST_CASE("PrefetchedData: restore mid-stream continues as the source restored there",
          "[engine][data][prefetch]") {
  nmt::PrefetchedData wrapped(std::make_unique<FakeData>());
  FakeData plain;
  nlohmann::json saved;
  for (int s = 0; s < 12; ++s) {
    wrapped.next_train();
    if (s == 4) saved = wrapped.position();
  }
  CHECK(saved == nlohmann::json{{"batch", 5}});
  wrapped.restore(saved);  // drops the 13th batch, built ahead
  plain.restore(saved);
  CHECK(wrapped.position() == plain.position());
  check_same_stream(wrapped, plain, 20);
  // Restoring before any batch, and back to the start.
  nmt::PrefetchedData fresh(std::make_unique<FakeData>());
  fresh.restore(nlohmann::json{{"batch", 30}});
  plain.restore(nlohmann::json{{"batch", 30}});
  check_same_stream(fresh, plain, 10);
  fresh.restore(nlohmann::json{{"batch", 0}});
  plain.restore(nlohmann::json{{"batch", 0}});
  check_same_stream(fresh, plain, 10);
}

TEST_CASE("PrefetchedData: an exception building batch k comes out of the k-th next_train",
          "[engine][data][prefetch]") {
  for (int64_t k : {0, 1, 6}) {
    INFO("failing batch " << k);
    auto inner = std::make_unique<FakeData>();
    FakeData* fake = inner.get();
    fake->throw_at = k;
    nmt::PrefetchedData wrapped(std::move(inner));
    FakeData plain;
    plain.throw_at = k;
    for (int64_t s = 0; s < k; ++s) check_same(wrapped.next_train(), plain.next_train());
    if (k > 0) {
      // Batch k failed on the worker already: nothing is thrown before it is asked for.
      wait_until(fake->finished, k + 1);
      CHECK_NOTHROW(wrapped.position());
      CHECK(wrapped.position() == plain.position());
      CHECK_NOTHROW(wrapped.dev_pairs());
    }
    CHECK_THROWS_WITH(wrapped.next_train(), "batch " + std::to_string(k) + " is broken");
    CHECK_THROWS(plain.next_train());
    // Asked again, the source is asked again (here it succeeds): as without the wrapper.
    check_same_stream(wrapped, plain, 5);
    CHECK(fake->overlaps.load() == 0);
  }
  // A failed prefetch nobody asks for is dropped with the wrapper.
  auto inner = std::make_unique<FakeData>();
  inner->throw_at = 3;
  {
    nmt::PrefetchedData wrapped(std::move(inner));
    for (int s = 0; s < 3; ++s) wrapped.next_train();
  }
}

TEST_CASE("PrefetchedData: dev accessors wait for the batch being built",
          "[engine][data][prefetch]") {
  auto inner = std::make_unique<FakeData>();
  FakeData* fake = inner.get();
  fake->delay = std::chrono::milliseconds(20);
  nmt::PrefetchedData wrapped(std::move(inner));
  std::vector<int32_t> source, target;
  for (int64_t s = 0; s < 4; ++s) {
    wrapped.next_train();
    wait_until(fake->started, s + 2);  // the next batch is being built (for 20 ms)
    wrapped.dev_pair(2, source, target);
    CHECK(source == std::vector<int32_t>{2});
    CHECK(target == std::vector<int32_t>{2, 2});
    CHECK(wrapped.dev_pairs() == 3);
    CHECK(wrapped.dev_references().size() == 3);
    CHECK(wrapped.dev_sources_text().size() == 3);
    CHECK(wrapped.describe() == "fake");
    CHECK(wrapped.vocab() == nullptr);
    CHECK(wrapped.vocab_size() == 11);
    CHECK(wrapped.max_padded_len() == 16);
  }
  CHECK(fake->overlaps.load() == 0);
}

TEST_CASE("make_training_data prefetches unless switched off, with the same synthetic stream",
          "[engine][data][prefetch]") {
  nmt::RunConfig cfg = nmt::test::tiny_reverse_config();
  nmt::set_prefetch_data(true);
  std::unique_ptr<nmt::TrainingData> wrapped = nmt::make_training_data(cfg, 1, 0);
  nmt::set_prefetch_data(false);
  std::unique_ptr<nmt::TrainingData> plain = nmt::make_training_data(cfg, 1, 0);
  nmt::set_prefetch_data(true);
  CHECK(dynamic_cast<nmt::PrefetchedData*>(wrapped.get()) != nullptr);
  CHECK(dynamic_cast<nmt::PrefetchedData*>(plain.get()) == nullptr);
  CHECK(wrapped->describe() == plain->describe());
  check_same_stream(*wrapped, *plain, 30);
  nlohmann::json saved = wrapped->position();
  check_same_stream(*wrapped, *plain, 5);
  wrapped->restore(saved);
  plain->restore(saved);
  check_same_stream(*wrapped, *plain, 10);
}
