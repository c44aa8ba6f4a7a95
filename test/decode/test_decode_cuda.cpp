// Beam search on the GPU: the trained reversal model decodes the same tokens (and scores within
// float tolerance) on CUDA as on the CPU, beam 1 matches greedy_decode on CUDA, and translate_lines
// runs end to end with --device cuda. The incremental decoder against the full decoder on CUDA in
// fp32 and bf16, and its ops against the CPU's bits.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "data/special_ids.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/decode/decode.h"
#include "engine/decode/decode_translate.h"
#include "engine/model/arena.h"
#include "engine/model/host_copy.h"
#include "engine/model/model_shape.h"
#include "engine/train/synthetic_reverse.h"
#include "kernels/decode_ops.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "test/decode/decode_test_util.h"
#include "test/decode/incremental_test_util.h"
#include "test/support/catch.h"
#include "test/support/decode/full_prefix_decoder.h"
#include "test/support/decode/greedy_decode.h"

namespace {

using nmt::test::reverse_data;

std::unique_ptr<nmt::Transformer> trained_model(nmt::Device device) {
  nmt::RunConfig cfg = nmt::test::reverse_config();
  auto model = std::make_unique<nmt::Transformer>(
      nmt::model_shape_from(cfg.model, reverse_data().vocab()), device, 1024, 32);
  nmt::load_model_weights(nmt::test::trained_reverse_checkpoint(), model->params());
  return model;
}

}  // namespace

TEST_CASE("beam search on CUDA decodes what the CPU decodes", "[decode][cuda]") {
  int64_t beam = GENERATE(1, 4);
  INFO("beam " << beam);
  auto cpu = trained_model(nmt::Device::cpu);
  auto gpu = trained_model(nmt::Device::cuda);
  nmt::BeamOptions o;
  o.beam = beam;
  const auto& sources = reverse_data().dev_sources();
  auto on_cpu = nmt::BeamSearch(*cpu, o).search(sources);
  auto on_gpu = nmt::BeamSearch(*gpu, o).search(sources);
  REQUIRE(on_gpu.size() == on_cpu.size());
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    REQUIRE(!on_gpu[i].empty());
    CHECK(on_gpu[i].front().tokens == on_cpu[i].front().tokens);
    CHECK(on_gpu[i].front().score == Approx(on_cpu[i].front().score).margin(1e-4));
  }
}

TEST_CASE("beam 1 on CUDA matches greedy_decode on CUDA", "[decode][cuda]") {
  auto gpu = trained_model(nmt::Device::cuda);
  nmt::BeamOptions o;
  o.beam = 1;
  o.max_len_a = 0;
  o.max_len_b = 14;
  nmt::BeamSearch search(*gpu, o);
  for (const nmt::Batch& batch : reverse_data().dev_batches(16)) {
    auto greedy = nmt::test::greedy_decode(*gpu, batch, o.max_len_b);
    auto found = search.search(batch);
    REQUIRE(found.size() == greedy.size());
    for (size_t i = 0; i < greedy.size(); ++i) CHECK(found[i].front().tokens == greedy[i]);
  }
}

TEST_CASE("translate_lines with --device cuda gives the CPU's lines", "[decode][cuda]") {
  const nmt::test::ReverseText& text = nmt::test::reverse_text();
  nmt::TranslateOptions o;
  o.checkpoint = nmt::test::trained_reverse_checkpoint();
  o.vocab = text.vocab;
  o.device = nmt::Device::cpu;
  std::vector<std::string> on_cpu = nmt::translate_lines(o, text.sources);
  o.device = nmt::Device::cuda;
  o.dtype = nmt::DType::f32;
  CHECK(nmt::translate_lines(o, text.sources) == on_cpu);
  CHECK(nmt::default_decode_device() == nmt::Device::cuda);  // this suite runs only with a GPU
  // The GPU's default, bf16: the same lines but for the odd rounding-borne tie.
  o.dtype.reset();
  std::vector<std::string> in_bf16 = nmt::translate_lines(o, text.sources);
  REQUIRE(in_bf16.size() == on_cpu.size());
  size_t same = 0;
  for (size_t i = 0; i < on_cpu.size(); ++i) same += in_bf16[i] == on_cpu[i] ? 1 : 0;
  INFO(same << " of " << on_cpu.size() << " lines as in f32");
  CHECK(same * 10 >= on_cpu.size() * 9);
}

namespace {

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("incremental steps on CUDA give decode_last_logits' logits (fp32)", "[decode][cuda]") {
  bool pre_norm = GENERATE(false, true);
  bool shared = GENERATE(true, false);
  INFO((pre_norm ? "pre-norm" : "post-norm")
       << ", " << (shared ? "shared" : "separate") << " embeddings");
  auto model = nmt::test::perturbed_model(nmt::Device::cuda, nmt::DType::f32, pre_norm, shared, 3);
  nmt::test::StepComparison c = nmt::test::compare_incremental_with_full(*model, 17);
  INFO("max |diff| " << c.max_abs_diff << ", max |logit| " << c.max_abs_logit);
  CHECK(c.rows == 4 * 6 + 2 * 6 + 3 * 4);
  CHECK(c.argmax_agree == c.rows);
  // cuBLAS sums in an order that depends on the shapes: equal up to fp32 rounding.
  CHECK(c.max_abs_diff <= 1e-4 * std::max(1.0, c.max_abs_logit));
}

TEST_CASE("incremental steps on CUDA in bf16: as close to fp32 as the full decoder is",
          "[decode][cuda]") {
  bool pre_norm = GENERATE(false, true);
  INFO((pre_norm ? "pre-norm" : "post-norm"));
  auto fp32 = nmt::test::perturbed_model(nmt::Device::cuda, nmt::DType::f32, pre_norm, true, 3);
  auto bf16 = nmt::test::perturbed_model(nmt::Device::cuda, nmt::DType::bf16, pre_norm, true, 3);
  nmt::test::StepComparison reference = nmt::test::compare_incremental_with_full(*fp32, 17);
  nmt::test::StepComparison c = nmt::test::compare_incremental_with_full(*bf16, 17);
  REQUIRE(c.full.size() == reference.full.size());
  double incremental_error = max_abs_diff(c.incremental, reference.full);
  double full_error = max_abs_diff(c.full, reference.full);
  INFO("bf16 error against fp32: incremental "
       << incremental_error << ", full prefix " << full_error << "; max |logit| "
       << reference.max_abs_logit << "; argmax agree " << c.argmax_agree << " of " << c.rows);
  // The flash-attention rule: a low-precision path is judged by the error of a straightforward
  // one in the same precision (here the full decoder), not by a magic absolute tolerance.
  CHECK(incremental_error <= 2 * full_error + 1e-3 * reference.max_abs_logit);
  CHECK(incremental_error <= 0.05 * reference.max_abs_logit);
  CHECK(c.argmax_agree * 10 >= c.rows * 9);
}

TEST_CASE("decode ops on CUDA: embedding_forward's row at each row's position, exact copies",
          "[decode][cuda]") {
  nmt::DType dtype = GENERATE(nmt::DType::f32, nmt::DType::bf16);
  INFO(nmt::dtype_name(dtype));
  const int64_t vocab = 11, d = 24, rows = 5, len = 6;
  nmt::Arena arena(nmt::Device::cuda, 1 << 20);
  auto upload_floats = [&](const std::vector<float>& host, std::initializer_list<int64_t> dims) {
    std::vector<float> copy = host;
    nmt::Tensor src(copy.data(), nmt::DType::f32, nmt::Device::cpu,
                    {static_cast<int64_t>(copy.size())});
    nmt::Buffer f32 = arena.allocate("f32", nmt::DType::f32, src.numel());
    nmt::Buffer out = arena.allocate("out", dtype, src.numel());
    nmt::Tensor staged = f32.view({src.numel()}), converted = out.view({src.numel()});
    nmt::copy_tensor(src, staged);
    nmt::convert_tensor(staged, converted);
    return converted.reshaped(dims);
  };
  auto upload_ids = [&](std::vector<int32_t> host) {
    nmt::Tensor src(host.data(), nmt::DType::i32, nmt::Device::cpu,
                    {static_cast<int64_t>(host.size())});
    nmt::Tensor dst = arena.allocate("ids", nmt::DType::i32, src.numel()).view({src.numel()});
    nmt::copy_tensor(src, dst);
    return dst;
  };
  std::vector<float> table_host(vocab * d);
  for (size_t i = 0; i < table_host.size(); ++i)
    table_host[i] = 0.013f * static_cast<float>(i % 41) - 0.25f;
  nmt::Tensor table = upload_floats(table_host, {vocab, d});

  // The embedding at each row's own position against embedding_forward's row at that position,
  // both on CUDA: sentence r of the full batch holds ids[r] at positions[r].
  std::vector<int32_t> ids{5, nmt::kPadId, 10, 4, 7}, positions{4, 0, 5, 2, 1};
  std::vector<int32_t> sequence(rows * len, nmt::kPadId);
  for (int64_t r = 0; r < rows; ++r) sequence[r * len + positions[r]] = ids[r];
  nmt::Tensor at = arena.allocate("at", dtype, rows * d).view({rows, d});
  nmt::Tensor full = arena.allocate("full", dtype, rows * len * d).view({rows * len, d});
  nmt::Tensor device_positions = upload_ids(positions);
  nmt::embedding_forward_at(upload_ids(ids), device_positions, table, at, 4.9f, nmt::kPadId);
  nmt::embedding_forward(upload_ids(sequence), table, full, len, 4.9f, nmt::kPadId);
  std::vector<float> at_host, full_host;
  nmt::copy_to_host_f32(at, at_host);
  nmt::copy_to_host_f32(full, full_host);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j)
      CHECK(at_host[r * d + j] == full_host[(r * len + positions[r]) * d + j]);

  // Cache write (each row at its position) and block gather: copies, so the same bits as the CPU.
  std::vector<float> cache_host(rows * len * d);
  for (size_t i = 0; i < cache_host.size(); ++i) cache_host[i] = static_cast<float>(i % 97);
  nmt::Tensor cache = upload_floats(cache_host, {rows, len, d});
  nmt::cache_write_position(at, device_positions, cache);
  nmt::Tensor gathered = arena.allocate("gathered", dtype, rows * len * d).view({rows, len, d});
  nmt::fill_zero(gathered);
  nmt::gather_blocks(cache, upload_ids({4, 4, 0, 2}), gathered, 3);
  std::vector<float> cache_after, gathered_host;
  nmt::copy_to_host_f32(cache, cache_after);
  nmt::copy_to_host_f32(gathered, gathered_host);
  std::vector<int32_t> index{4, 4, 0, 2};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < len; ++t)
      for (int64_t j = 0; j < d; ++j) {
        float expected = t == positions[r] ? at_host[r * d + j] : cache_host[(r * len + t) * d + j];
        CHECK(cache_after[(r * len + t) * d + j] == expected);
        float gathered_expected = r < 4 && t < 3 ? cache_after[(index[r] * len + t) * d + j] : 0.0f;
        CHECK(gathered_host[(r * len + t) * d + j] == gathered_expected);
      }
}

TEST_CASE("beam search on CUDA: the incremental decoder finds what the full-prefix path finds",
          "[decode][cuda]") {
  int64_t beam = GENERATE(1, 4);
  INFO("beam " << beam);
  auto gpu = trained_model(nmt::Device::cuda);
  nmt::BeamOptions o;
  o.beam = beam;
  const auto& sources = reverse_data().dev_sources();
  auto incremental = nmt::BeamSearch(*gpu, o).search(sources);
  auto full = nmt::BeamSearch(*gpu, o, std::make_unique<nmt::test::FullPrefixDecoder>(*gpu))
                  .search(sources);
  REQUIRE(incremental.size() == full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    CHECK(incremental[i].front().tokens == full[i].front().tokens);
    CHECK(incremental[i].front().score == Approx(full[i].front().score).margin(1e-4));
  }
}

TEST_CASE("logits_top_k on CUDA: the CPU reference's ids and logits, log-sum-exp within float",
          "[decode][cuda]") {
  nmt::DType dtype = GENERATE(nmt::DType::f32, nmt::DType::bf16, nmt::DType::f16);
  INFO(nmt::dtype_name(dtype));
  // Odd vocabularies (fewer and more entries than the block's threads) and every compiled list.
  for (int64_t vocab : {3, 300, 8003}) {
    for (int64_t k : {1, 2, 3, 5, 9, 16}) {
      if (k > vocab) continue;
      INFO("vocab " << vocab << ", k " << k);
      const int64_t rows = 7;
      std::vector<float> host(rows * vocab);
      for (int64_t i = 0; i < rows * vocab; ++i)  // coarse values: ties in every dtype
        host[i] = 0.25f * static_cast<float>((i * 7919 + 13) % 61) - 7.0f;
      for (int64_t r = 0; r < rows; r += 2) host[r * vocab + (r * 5) % vocab] = NAN;  // as -inf
      nmt::Arena arena(nmt::Device::cuda, 1 << 22);
      std::vector<float> staged_host = host;
      nmt::Tensor src(staged_host.data(), nmt::DType::f32, nmt::Device::cpu, {rows, vocab});
      nmt::Tensor f32 = arena.allocate("f32", nmt::DType::f32, rows * vocab).view({rows, vocab});
      nmt::Tensor logits = arena.allocate("logits", dtype, rows * vocab).view({rows, vocab});
      nmt::copy_tensor(src, f32);
      nmt::convert_tensor(f32, logits);
      std::vector<float> rounded;  // the logits as the kernel reads them
      nmt::copy_to_host_f32(logits, rounded);
      nmt::Tensor ids = arena.allocate("ids", nmt::DType::i32, rows * k).view({rows, k});
      nmt::Tensor top = arena.allocate("top", nmt::DType::f32, rows * k).view({rows, k});
      nmt::Tensor stats = arena.allocate("stats", nmt::DType::f32, rows * 2).view({rows, 2});
      const auto extra = static_cast<int32_t>(vocab - 1);
      nmt::logits_top_k(logits, extra, ids, top, stats);

      std::vector<int32_t> want_ids(rows * k), got_ids(rows * k);
      std::vector<float> want_top(rows * k), want_stats(rows * 2), got_top, got_stats;
      nmt::Tensor want_ids_t(want_ids.data(), nmt::DType::i32, nmt::Device::cpu, {rows, k});
      nmt::Tensor want_top_t(want_top.data(), nmt::DType::f32, nmt::Device::cpu, {rows, k});
      nmt::Tensor want_stats_t(want_stats.data(), nmt::DType::f32, nmt::Device::cpu, {rows, 2});
      nmt::Tensor rounded_t(rounded.data(), nmt::DType::f32, nmt::Device::cpu, {rows, vocab});
      nmt::logits_top_k(rounded_t, extra, want_ids_t, want_top_t, want_stats_t);
      nmt::Tensor got_ids_t(got_ids.data(), nmt::DType::i32, nmt::Device::cpu, {rows, k});
      nmt::copy_tensor(ids, got_ids_t);
      nmt::copy_to_host_f32(top, got_top);
      nmt::copy_to_host_f32(stats, got_stats);
      CHECK(got_ids == want_ids);
      CHECK(got_top == want_top);
      for (int64_t r = 0; r < rows; ++r) {
        CHECK(got_stats[2 * r] == Approx(want_stats[2 * r]).epsilon(1e-6));
        CHECK(got_stats[2 * r + 1] == want_stats[2 * r + 1]);
      }
    }
  }
}

TEST_CASE("cached_attention on CUDA: the CPU reference's output at odd shapes and every dtype",
          "[decode][cuda]") {
  nmt::DType dtype = GENERATE(nmt::DType::f32, nmt::DType::bf16, nmt::DType::f16);
  // Head sizes: scalar key loads (7), 16-byte loads (64), wider than the block's threads (160).
  const int64_t head_dim = GENERATE(7, 64, 160);
  const int64_t queries = GENERATE(1, 4);
  // Lengths: fully masked, one key, past the block's 128 threads, past the cache (clamped).
  const int64_t blocks = 6, length = 203, heads = 3, width = heads * head_dim;
  const int64_t rows = blocks * queries;
  INFO(nmt::dtype_name(dtype) << ", head_dim " << head_dim << ", queries " << queries);
  std::vector<int32_t> lengths = {203, 0, 1, 130, 17, 500};
  auto values_of = [](int64_t n, int64_t salt, float amplitude) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[i] = amplitude * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt)) *
             std::cos(0.013f * static_cast<float>(i % 211));
    return v;
  };
  std::vector<float> q = values_of(rows * width, 1, 3.0f);
  std::vector<float> k = values_of(blocks * length * width, 2, 3.0f);
  std::vector<float> v = values_of(blocks * length * width, 3, 1.0f);

  nmt::Arena arena(nmt::Device::cuda, 64 << 20);
  // Uploads in f32, converts to dtype, and returns the rounded values the kernel reads.
  auto device_copy = [&](std::vector<float>& host, std::initializer_list<int64_t> dims,
                         const char* name) {
    const auto n = static_cast<int64_t>(host.size());
    nmt::Tensor src(host.data(), nmt::DType::f32, nmt::Device::cpu, {n});
    nmt::Tensor f32 = arena.allocate(name, nmt::DType::f32, n).view({n});
    nmt::Tensor t = arena.allocate(name, dtype, n).view({n});
    nmt::copy_tensor(src, f32);
    nmt::convert_tensor(f32, t);
    nmt::copy_to_host_f32(t, host);
    return t.reshaped(dims);
  };
  nmt::Tensor q_d = device_copy(q, {rows, width}, "q");
  nmt::Tensor k_d = device_copy(k, {blocks, length, width}, "k");
  nmt::Tensor v_d = device_copy(v, {blocks, length, width}, "v");
  nmt::Tensor lengths_d = arena.allocate("lengths", nmt::DType::i32, blocks).view({blocks});
  nmt::Tensor lengths_h(lengths.data(), nmt::DType::i32, nmt::Device::cpu, {blocks});
  nmt::copy_tensor(lengths_h, lengths_d);
  nmt::Tensor out_d = arena.allocate("out", dtype, rows * width).view({rows, width});
  nmt::cached_attention(q_d, k_d, v_d, lengths_d, out_d, heads);
  std::vector<float> got;
  nmt::copy_to_host_f32(out_d, got);

  std::vector<float> want(rows * width);
  nmt::Tensor want_t(want.data(), nmt::DType::f32, nmt::Device::cpu, {rows, width});
  nmt::cached_attention(
      nmt::Tensor(q.data(), nmt::DType::f32, nmt::Device::cpu, {rows, width}),
      nmt::Tensor(k.data(), nmt::DType::f32, nmt::Device::cpu, {blocks, length, width}),
      nmt::Tensor(v.data(), nmt::DType::f32, nmt::Device::cpu, {blocks, length, width}), lengths_h,
      want_t, heads);
  // f32: summation order only (scores of up to ~50 through exp); bf16/f16: the probabilities' and
  // the output's rounding (the CPU reference keeps them in f32; values are within [-1, 1]).
  const double tolerance = dtype == nmt::DType::f32    ? 2e-5
                           : dtype == nmt::DType::bf16 ? 1.6e-2
                                                       : 2e-3;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  INFO("max |diff| " << worst);
  CHECK(worst <= tolerance);
  for (int64_t r = queries; r < 2 * queries; ++r)  // block 1 sees no key
    for (int64_t c = 0; c < width; ++c) CHECK(got[r * width + c] == 0.0f);

  // The queries as the first third of a joined [rows, 3 * width] matrix, the keys and values
  // written into the caches from the other two thirds: the same bits.
  std::vector<float> joined(rows * 3 * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      joined[r * 3 * width + c] = q[r * width + c];
      joined[r * 3 * width + width + c] = 0.5f;
      joined[r * 3 * width + 2 * width + c] = -0.25f;
    }
  nmt::Tensor joined_d = device_copy(joined, {rows, 3 * width}, "joined");
  nmt::Tensor sliced_d = arena.allocate("sliced", dtype, rows * width).view({rows, width});
  nmt::cached_attention(joined_d, k_d, v_d, lengths_d, sliced_d, heads, 0);
  std::vector<float> sliced;
  nmt::copy_to_host_f32(sliced_d, sliced);
  CHECK(sliced == got);
  // One row per block, written at position 5 of each block from the joined matrix's k and v parts.
  if (queries == 1) {
    std::vector<int32_t> fives(static_cast<size_t>(blocks), 5);
    nmt::Tensor positions_d = arena.allocate("positions", nmt::DType::i32, blocks).view({blocks});
    nmt::Tensor fives_h(fives.data(), nmt::DType::i32, nmt::Device::cpu, {blocks});
    nmt::copy_tensor(fives_h, positions_d);
    nmt::cache_write_position(joined_d, positions_d, k_d, width);
    nmt::cache_write_position(joined_d, positions_d, v_d, 2 * width);
    std::vector<float> keys, values;
    nmt::copy_to_host_f32(k_d, keys);
    nmt::copy_to_host_f32(v_d, values);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t t = 4; t < 7; ++t)
        for (int64_t c = 0; c < width; ++c) {
          const int64_t at = (b * length + t) * width + c;
          CHECK(keys[at] == (t == 5 ? 0.5f : k[at]));
          CHECK(values[at] == (t == 5 ? -0.25f : v[at]));
        }
  }
}
