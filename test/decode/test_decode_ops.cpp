// The incremental-decoding ops on the CPU (kernels/decode_ops.h): the one-position embedding is
// embedding_forward's row at that position bit for bit, cache writes land at their position, and
// block gathers copy the used part of each chosen block, logits_top_k ranks as a full sort does;
// bad arguments are named.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "data/special_ids.h"
#include "kernels/decode_ops.h"
#include "kernels/embedding.h"
#include "test/decode/decode_test_util.h"
#include "test/support/catch.h"

namespace {

using nmt::test::contains;
using nmt::test::error_of;

nmt::Tensor cpu(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return nmt::Tensor(v.data(), nmt::DType::f32, nmt::Device::cpu, dims);
}
nmt::Tensor cpu(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return nmt::Tensor(v.data(), nmt::DType::i32, nmt::Device::cpu, dims);
}

}  // namespace

TEST_CASE("embedding_forward_at is embedding_forward's row at that position", "[decode][ops]") {
  const int64_t vocab = 9, d = 7, seq_len = 12;  // odd d_model: the last dim has no sinusoid
  std::vector<float> table(vocab * d);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.01f * static_cast<float>(i % 37) - 0.2f;
  std::vector<int32_t> ids{5, nmt::kPadId, 8};
  // The full sequence: every row holds ids[r % 3], at position = row.
  std::vector<int32_t> sequence(seq_len);
  for (int64_t t = 0; t < seq_len; ++t) sequence[t] = ids[t % 3];
  std::vector<float> full(seq_len * d), one(3 * d);
  nmt::Tensor full_out = cpu(full, {seq_len, d}), one_out = cpu(one, {3, d});
  nmt::embedding_forward(cpu(sequence, {seq_len}), cpu(table, {vocab, d}), full_out, seq_len, 2.5f,
                         nmt::kPadId);
  for (int64_t position : {0, 4, 11}) {
    nmt::embedding_forward_at(cpu(ids, {3}), cpu(table, {vocab, d}), one_out, position, 2.5f,
                              nmt::kPadId);
    const float* row = one.data() + (position % 3) * d;
    for (int64_t j = 0; j < d; ++j) CHECK(row[j] == full[position * d + j]);
  }
  for (int64_t j = 0; j < d; ++j) CHECK(one[d + j] == 0.0f);  // the pad row
  std::vector<int32_t> bad{9};
  std::vector<float> out(d);
  nmt::Tensor bad_out = cpu(out, {1, d});
  CHECK(contains(error_of([&] {
                   nmt::embedding_forward_at(cpu(bad, {1}), cpu(table, {vocab, d}), bad_out, 0,
                                             1.0f, nmt::kPadId);
                 }),
                 "id 9 at row 0"));
}

TEST_CASE("cache_write_position and gather_blocks copy what they say", "[decode][ops]") {
  const int64_t rows = 3, len = 4, width = 2;
  std::vector<float> cache(rows * len * width, -1.0f), x{1, 2, 3, 4, 5, 6};
  nmt::Tensor cache_t = cpu(cache, {rows, len, width});
  nmt::cache_write_position(cpu(x, {rows, width}), cache_t, 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < width; ++c)
        CHECK(cache[(r * len + t) * width + c] == (t == 2 ? x[r * width + c] : -1.0f));
  CHECK(contains(error_of([&] {
                   nmt::cache_write_position(cpu(x, {rows, width}), cache_t, 4);
                 }),
                 "position 4"));

  std::vector<float> src(rows * len * width);
  std::iota(src.begin(), src.end(), 0.0f);
  std::vector<float> dst(rows * len * width, -1.0f);
  std::vector<int32_t> index{2, 2, 0};
  nmt::Tensor dst_t = cpu(dst, {rows, len, width});
  nmt::gather_blocks(cpu(src, {rows, len, width}), cpu(index, {3}), dst_t, 3);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < width; ++c)
        CHECK(dst[(i * len + t) * width + c] ==
              (t < 3 ? src[(index[i] * len + t) * width + c] : -1.0f));
  std::vector<int32_t> bad{3};
  CHECK(contains(error_of([&] {
                   nmt::gather_blocks(cpu(src, {rows, len, width}), cpu(bad, {1}), dst_t, 1);
                 }),
                 "index[0] = 3"));
  CHECK(contains(error_of([&] {
                   nmt::gather_blocks(cpu(src, {rows, len, width}), cpu(index, {3}), dst_t, 5);
                 }),
                 "used_len 5"));
}

TEST_CASE("logits_top_k: the k best ids by a full sort, ties to the lower id, log-sum-exp",
          "[decode][ops]") {
  const int64_t rows = 5, vocab = 37;
  std::vector<float> logits(rows * vocab);
  for (int64_t i = 0; i < rows * vocab; ++i)  // few distinct values: many ties
    logits[i] = 0.5f * static_cast<float>((i * 7919) % 11) - 2.0f;
  logits[2 * vocab + 3] = -INFINITY;  // an id that can never win
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{16}, vocab}) {
    INFO("k = " << k);
    std::vector<int32_t> ids(rows * k);
    std::vector<float> top(rows * k), stats(rows * 2);
    nmt::Tensor ids_out = cpu(ids, {rows, k}), top_out = cpu(top, {rows, k}),
                stats_out = cpu(stats, {rows, 2});
    if (k > nmt::kMaxTopK) {
      CHECK(
          contains(error_of([&] {
                     nmt::logits_top_k(cpu(logits, {rows, vocab}), 2, ids_out, top_out, stats_out);
                   }),
                   "k = 37"));
      continue;
    }
    nmt::logits_top_k(cpu(logits, {rows, vocab}), 2, ids_out, top_out, stats_out);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * vocab;
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      double sum = 0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j]));
      for (int64_t i = 0; i < k; ++i) {
        CHECK(ids[r * k + i] == order[i]);
        CHECK(top[r * k + i] == row[order[i]]);
      }
      CHECK(stats[2 * r] == Approx(std::log(sum)).epsilon(1e-6));
      CHECK(stats[2 * r + 1] == row[2]);
    }
  }
  std::vector<int32_t> ids(rows);
  std::vector<float> top(rows), stats(rows * 2);
  nmt::Tensor ids_out = cpu(ids, {rows, 1}), top_out = cpu(top, {rows, 1}),
              stats_out = cpu(stats, {rows, 2});
  CHECK(contains(error_of([&] {
                   nmt::logits_top_k(cpu(logits, {rows, vocab}), static_cast<int32_t>(vocab),
                                     ids_out, top_out, stats_out);
                 }),
                 "extra_id 37"));
}

TEST_CASE("logits_top_k ranks a NaN logit as -inf: every returned id is a real one",
          "[decode][ops]") {
  const int64_t vocab = 6, k = 3;
  std::vector<float> logits{NAN, 1.0f, NAN, 3.0f, NAN, NAN};
  std::vector<int32_t> ids(k);
  std::vector<float> top(k), stats(2);
  nmt::Tensor ids_out = cpu(ids, {1, k}), top_out = cpu(top, {1, k}),
              stats_out = cpu(stats, {1, 2});
  nmt::logits_top_k(cpu(logits, {1, vocab}), 0, ids_out, top_out, stats_out);
  CHECK(ids == std::vector<int32_t>{3, 1, 0});  // 3.0, 1.0, then the lowest id of the -inf ones
  CHECK(top[0] == 3.0f);
  CHECK(top[2] == -INFINITY);
  CHECK(stats[1] == -INFINITY);  // the extra id's logit, NaN on input
  CHECK(stats[0] == Approx(3.0 + std::log1p(std::exp(-2.0))));
}
