// The incremental-decoding ops on the CPU (kernels/decode_ops.h): the embedding at each row's own
// position is embedding_forward's row at that position bit for bit, cache writes land at each row's
// position, block gathers copy the used part of each chosen block, logits_top_k ranks as a full
// sort does, cached_attention gives attention_forward's output; bad arguments are named.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "data/special_ids.h"
#include "kernels/attention.h"
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

TEST_CASE("embedding_forward_at is embedding_forward's row at each row's position",
          "[decode][ops]") {
  const int64_t vocab = 9, d = 7, seq_len = 12;  // odd d_model: the last dim has no sinusoid
  std::vector<float> table(vocab * d);
  for (size_t i = 0; i < table.size(); ++i) table[i] = 0.01f * static_cast<float>(i % 37) - 0.2f;
  // One sentence: position t holds sequence[t] (a pad among them), embedded whole.
  std::vector<int32_t> sequence(seq_len);
  for (int64_t t = 0; t < seq_len; ++t)
    sequence[t] = t == 6 ? nmt::kPadId : static_cast<int32_t>(1 + (t * 5) % (vocab - 1));
  std::vector<float> full(seq_len * d);
  nmt::Tensor full_out = cpu(full, {seq_len, d});
  nmt::embedding_forward(cpu(sequence, {seq_len}), cpu(table, {vocab, d}), full_out, seq_len, 2.5f,
                         nmt::kPadId);
  for (int64_t rows : {1, 3, 7}) {
    INFO("rows " << rows);
    // Every row at a position of its own (not in order, the pad's among them).
    std::vector<int32_t> ids(rows), positions(rows);
    for (int64_t r = 0; r < rows; ++r) {
      positions[r] = static_cast<int32_t>((5 * r + 6) % seq_len);
      ids[r] = sequence[positions[r]];
    }
    std::vector<float> one(rows * d, -1.0f);
    nmt::Tensor one_out = cpu(one, {rows, d});
    nmt::embedding_forward_at(cpu(ids, {rows}), cpu(positions, {rows}), cpu(table, {vocab, d}),
                              one_out, 2.5f, nmt::kPadId);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < d; ++j) CHECK(one[r * d + j] == full[positions[r] * d + j]);
  }
  std::vector<int32_t> ids{5, 9, 5}, positions{0, 1, 2};
  std::vector<float> out(3 * d);
  nmt::Tensor out_t = cpu(out, {3, d});
  CHECK(contains(error_of([&] {
                   nmt::embedding_forward_at(cpu(ids, {3}), cpu(positions, {3}),
                                             cpu(table, {vocab, d}), out_t, 1.0f, nmt::kPadId);
                 }),
                 "id 9 at row 1"));
  ids[1] = 5;
  positions[2] = -1;
  CHECK(contains(error_of([&] {
                   nmt::embedding_forward_at(cpu(ids, {3}), cpu(positions, {3}),
                                             cpu(table, {vocab, d}), out_t, 1.0f, nmt::kPadId);
                 }),
                 "position -1 at row 2"));
  CHECK(contains(error_of([&] {
                   nmt::embedding_forward_at(cpu(ids, {3}), cpu(positions, {2}),
                                             cpu(table, {vocab, d}), out_t, 1.0f, nmt::kPadId);
                 }),
                 "positions"));
}

TEST_CASE("cache_write_position writes each row at its own position", "[decode][ops]") {
  const int64_t len = 5, width = 3;
  for (int64_t rows : {1, 3, 7}) {
    INFO("rows " << rows);
    std::vector<float> cache(rows * len * width, -1.0f), x(rows * width);
    std::iota(x.begin(), x.end(), 1.0f);
    std::vector<int32_t> positions(rows);
    for (int64_t r = 0; r < rows; ++r) positions[r] = static_cast<int32_t>((3 * r + 4) % len);
    nmt::Tensor cache_t = cpu(cache, {rows, len, width});
    nmt::cache_write_position(cpu(x, {rows, width}), cpu(positions, {rows}), cache_t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < len; ++t)
        for (int64_t c = 0; c < width; ++c)
          CHECK(cache[(r * len + t) * width + c] == (t == positions[r] ? x[r * width + c] : -1.0f));
  }
  std::vector<float> cache(3 * len * width), x(3 * width);
  nmt::Tensor cache_t = cpu(cache, {3, len, width});
  std::vector<int32_t> past_end{0, 5, 1}, negative{0, 1, -2};
  CHECK(contains(error_of([&] {
                   nmt::cache_write_position(cpu(x, {3, width}), cpu(past_end, {3}), cache_t);
                 }),
                 "position 5 at row 1"));
  CHECK(contains(error_of([&] {
                   nmt::cache_write_position(cpu(x, {3, width}), cpu(negative, {3}), cache_t);
                 }),
                 "position -2 at row 2"));
}

TEST_CASE("cache_write_position takes a column slice of a wider x (a joined q | k | v)",
          "[decode][ops]") {
  const int64_t rows = 3, len = 4, width = 5, x_width = 3 * width;
  std::vector<float> x(rows * x_width), cache(rows * len * width, -1.0f);
  std::iota(x.begin(), x.end(), 0.0f);
  std::vector<int32_t> positions{2, 0, 3};
  nmt::Tensor cache_t = cpu(cache, {rows, len, width});
  nmt::cache_write_position(cpu(x, {rows, x_width}), cpu(positions, {rows}), cache_t, 2 * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t c = 0; c < width; ++c)
        CHECK(cache[(r * len + t) * width + c] ==
              (t == positions[r] ? x[r * x_width + 2 * width + c] : -1.0f));
  CHECK(contains(error_of([&] {
                   nmt::cache_write_position(cpu(x, {rows, x_width}), cpu(positions, {rows}),
                                             cache_t, 2 * width + 1);
                 }),
                 "columns [11, 16) are outside x"));
  // Without an offset, x must be the rows themselves: a wider x is a mistake.
  CHECK(contains(
      error_of([&] {
        nmt::cache_write_position(cpu(x, {rows, x_width}), cpu(positions, {rows}), cache_t);
      }),
      "x has shape"));
}

TEST_CASE("gather_blocks copies the used part of each chosen block", "[decode][ops]") {
  const int64_t rows = 3, len = 4, width = 2;
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

namespace {

// Deterministic values in about [-1, 1] from an index and a salt.
float wave(int64_t i, int64_t salt) {
  return 0.5f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt)) +
         0.4f * std::cos(0.11f * static_cast<float>(i * salt % 97));
}

}  // namespace

TEST_CASE("cached_attention is attention_forward's output with its lengths, queries per block",
          "[decode][ops]") {
  // Self-attention steps (one query per block) and cross-attention (a beam of queries per block);
  // odd head sizes; lengths from fully masked to the whole cache.
  const int64_t queries = GENERATE(1, 3);
  const int64_t head_dim = GENERATE(1, 7, 16);
  const int64_t blocks = 5, length = 9, heads = 3, width = heads * head_dim;
  INFO("queries " << queries << ", head_dim " << head_dim);
  const int64_t rows = blocks * queries;
  std::vector<float> q(rows * width), k(blocks * length * width), v(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = 2.0f * wave(static_cast<int64_t>(i), 3);
  for (size_t i = 0; i < k.size(); ++i) k[i] = 2.0f * wave(static_cast<int64_t>(i), 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = wave(static_cast<int64_t>(i), 7);
  std::vector<int32_t> lengths = {9, 0, 1, 4, 8};
  std::vector<float> got(rows * width, 42.0f), want(rows * width),
      probs(blocks * heads * queries * length);
  nmt::Tensor q_t = cpu(q, {rows, width}), out_t = cpu(got, {rows, width});
  nmt::Tensor lengths_t = cpu(lengths, {blocks});
  nmt::cached_attention(q_t, cpu(k, {blocks, length, width}), cpu(v, {blocks, length, width}),
                        lengths_t, out_t, heads);
  nmt::Tensor want_t = cpu(want, {rows, width});
  nmt::Tensor probs_t = cpu(probs, {blocks, heads, queries, length});
  nmt::AttentionShape shape{blocks, queries, length, heads, head_dim, false};
  nmt::attention_forward(q_t, cpu(k, {blocks * length, width}), cpu(v, {blocks * length, width}),
                         lengths_t, want_t, probs_t, shape, 0.0f, nmt::RngKey{});
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-6));
  // Block 1 sees no key: zero rows.
  for (int64_t r = queries; r < 2 * queries; ++r)
    for (int64_t c = 0; c < width; ++c) CHECK(got[r * width + c] == 0.0f);

  // The queries as a column slice of a wider matrix (a joined q | k | v): the same bits.
  std::vector<float> wide(rows * 3 * width, 9.0f), sliced(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) wide[r * 3 * width + width + c] = q[r * width + c];
  nmt::Tensor sliced_t = cpu(sliced, {rows, width});
  nmt::cached_attention(cpu(wide, {rows, 3 * width}), cpu(k, {blocks, length, width}),
                        cpu(v, {blocks, length, width}), lengths_t, sliced_t, heads, width);
  CHECK(sliced == got);

  // An empty batch does nothing.
  std::vector<float> none;
  nmt::Tensor empty_q = cpu(none, {0, width}), empty_out = cpu(none, {0, width});
  std::vector<int32_t> no_lengths;
  nmt::cached_attention(empty_q, cpu(none, {0, length, width}), cpu(none, {0, length, width}),
                        cpu(no_lengths, {0}), empty_out, heads);

  // A length past the cache counts as the whole cache.
  std::vector<int32_t> long_lengths = {100, 0, 1, 4, 8};
  std::vector<float> clamped(rows * width);
  nmt::Tensor clamped_t = cpu(clamped, {rows, width});
  nmt::cached_attention(q_t, cpu(k, {blocks, length, width}), cpu(v, {blocks, length, width}),
                        cpu(long_lengths, {blocks}), clamped_t, heads);
  CHECK(clamped == got);
}

TEST_CASE("cached_attention names a bad argument", "[decode][ops]") {
  std::vector<float> q(6 * 8), kv(3 * 4 * 8), out(6 * 8);
  std::vector<int32_t> lengths(3, 4);
  nmt::Tensor q_t = cpu(q, {6, 8}), out_t = cpu(out, {6, 8});
  nmt::Tensor keys = cpu(kv, {3, 4, 8}), values = cpu(kv, {3, 4, 8});
  CHECK(contains(
      error_of([&] { nmt::cached_attention(q_t, keys, values, cpu(lengths, {3}), out_t, 3); }),
      "heads = 3"));
  nmt::Tensor four_rows = cpu(q, {4, 8});
  nmt::Tensor four_out = cpu(out, {4, 8});
  CHECK(contains(error_of([&] {
                   nmt::cached_attention(four_rows, keys, values, cpu(lengths, {3}), four_out, 2);
                 }),
                 "not a whole number per block"));
  CHECK(contains(
      error_of([&] { nmt::cached_attention(q_t, keys, values, cpu(lengths, {2}), out_t, 2); }),
      "lengths"));
}
