// Token embedding: sinusoid values, lookup + scale + position, the d_table gradient, shape errors.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr int32_t kPad = 0;

std::vector<float> embed(const std::vector<int32_t>& ids, const std::vector<float>& table,
                         int64_t d_model, int64_t seq_len, float scale) {
  const int64_t rows = static_cast<int64_t>(ids.size());
  const int64_t vocab = static_cast<int64_t>(table.size()) / d_model;
  std::vector<float> out(static_cast<size_t>(rows * d_model));
  Tensor out_view = view(out, {rows, d_model});
  embedding_forward(view(ids, {rows}), view(table, {vocab, d_model}), out_view, seq_len, scale,
                    kPad);
  return out;
}

}  // namespace

TEST_CASE("sinusoid_position follows the fairseq/tensor2tensor layout", "[embedding]") {
  // d_model 4: half 2, inv_freq = {1, 10000^-1}; sin in dims 0..1, cos in dims 2..3.
  CHECK(sinusoid_position(3, 0, 4) == Approx(std::sin(3.0)));
  CHECK(sinusoid_position(3, 1, 4) == Approx(std::sin(3.0e-4)));
  CHECK(sinusoid_position(3, 2, 4) == Approx(std::cos(3.0)));
  CHECK(sinusoid_position(3, 3, 4) == Approx(std::cos(3.0e-4)));
  // d_model 8: inv_freq_i = 10000^(-i/3).
  CHECK(sinusoid_position(5, 2, 8) == Approx(std::sin(5.0 * std::pow(10000.0, -2.0 / 3.0))));
  CHECK(sinusoid_position(5, 6, 8) == Approx(std::cos(5.0 * std::pow(10000.0, -2.0 / 3.0))));
  // Position 0: sin 0, cos 1. An odd d_model leaves its last dim 0.
  CHECK(sinusoid_position(0, 1, 6) == 0.0f);
  CHECK(sinusoid_position(0, 4, 6) == 1.0f);
  CHECK(sinusoid_position(7, 6, 7) == 0.0f);
  // A single frequency (d_model 2 or 3) is 1, not 0/0.
  CHECK(sinusoid_position(2, 0, 3) == Approx(std::sin(2.0)));
  CHECK(sinusoid_position(2, 1, 3) == Approx(std::cos(2.0)));
  CHECK(sinusoid_position(2, 2, 3) == 0.0f);
}

TEST_CASE("embedding_forward scales the row, adds the position, zeroes pad rows", "[embedding]") {
  const int64_t d_model = 7, seq_len = 3;
  const float scale = 2.5f;
  const std::vector<float> table = random_uniform(5 * d_model, 1);
  const std::vector<int32_t> ids = {3, 1, kPad, 4, 4, 2};  // two sentences of 3
  const std::vector<float> out = embed(ids, table, d_model, seq_len, scale);
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t d = 0; d < d_model; ++d) {
      const float got = out[static_cast<size_t>(r * d_model + d)];
      if (ids[static_cast<size_t>(r)] == kPad) {
        CHECK(got == 0.0f);
      } else {
        const float expected = table[static_cast<size_t>(ids[r] * d_model + d)] * scale +
                               sinusoid_position(r % seq_len, d, d_model);
        CHECK(got == Approx(expected).margin(1e-6));
      }
    }
  }
}

TEST_CASE("embedding_backward matches finite differences and accumulates",
          "[embedding][gradcheck]") {
  const int64_t vocab = 6;
  const float scale = 1.7f;
  for (int64_t d_model : {1, 3, 13, 33}) {
    const int64_t seq_len = 4;
    const std::vector<int32_t> ids = {1, 5, 5, kPad, 2, 1, 3, kPad};  // repeated ids and pads
    const int64_t rows = static_cast<int64_t>(ids.size());
    const std::vector<float> table = random_uniform(static_cast<size_t>(vocab * d_model), 2);
    const std::vector<float> weights = random_uniform(static_cast<size_t>(rows * d_model), 3);

    // d_table starts at 1 to check that the backward adds to it.
    std::vector<float> d_table(table.size(), 1.0f);
    Tensor d_table_view = view(d_table, {vocab, d_model});
    embedding_backward(view(ids, {rows}), view(weights, {rows, d_model}), d_table_view, scale,
                       kPad);
    for (float& g : d_table) g -= 1.0f;
    // Rows no token uses (the pad row, id 4) get nothing.
    for (int64_t d = 0; d < d_model; ++d) {
      CHECK(d_table[static_cast<size_t>(kPad * d_model + d)] == 0.0f);
      CHECK(d_table[static_cast<size_t>(4 * d_model + d)] == 0.0f);
    }

    const auto loss = [&](const std::vector<float>& t) {
      return weighted_sum(embed(ids, t, d_model, seq_len, scale), weights);
    };
    // Linear in the table: no truncation error, so a large step shrinks the rounding error.
    const GradCheckResult result =
        check_gradient(loss, table, d_table, GradCheckOptions{0.25, 1e-2, 0});
    INFO("d_model " << d_model << ": " << result.describe());
    CHECK(result.max_rel_error < 1e-3);
  }
}

TEST_CASE("embedding ops reject bad shapes and ids, naming the op", "[embedding][errors]") {
  const std::vector<float> table(4 * 3);
  const std::vector<int32_t> ids = {1, 2, 3, 1};
  std::vector<float> out(4 * 3), short_out(3 * 3);
  Tensor out_view = view(out, {4, 3}), short_view = view(short_out, {3, 3});
  const auto message = [&](auto&& call) { return invalid_argument_message(call); };
  CHECK(message([&] {
          embedding_forward(view(ids, {4}), view(table, {4, 3}), short_view, 2, 1, 0);
        }).find("embedding_forward") != std::string::npos);
  CHECK(message([&] {
          embedding_forward(view(ids, {4}), view(table, {4, 3}), out_view, 3, 1, 0);
        }).find("seq_len") != std::string::npos);
  const std::vector<int32_t> bad_ids = {1, 2, 4, 1};  // 4 is outside a vocabulary of 4
  CHECK(message([&] {
          embedding_forward(view(bad_ids, {4}), view(table, {4, 3}), out_view, 2, 1, 0);
        }).find("outside the vocabulary") != std::string::npos);
  std::vector<float> d_table(4 * 3);
  Tensor d_table_view = view(d_table, {4, 3});
  CHECK(message([&] {
          embedding_backward(view(ids, {4}), short_view, d_table_view, 1, 0);
        }).find("embedding_backward") != std::string::npos);
  const std::vector<float> float_ids(4);
  CHECK(message([&] {
          embedding_forward(view(float_ids, {4}), view(table, {4, 3}), out_view, 2, 1, 0);
        }).find("ids must be i32") != std::string::npos);
}

// The CPU reference defines the fused ops as the two ops in turn (test_cuda_kernels holds the GPU
// to it); what this checks is the plumbing: the mask drops elements, and d_out stays unchanged.
TEST_CASE("the embedding's dropout is the dropout op applied to its output and gradient",
          "[embedding]") {
  const int64_t d_model = 9, seq_len = 4, rows = 12, vocab = 6;
  const float scale = 1.5f, p = 0.3f;
  const RngKey key{11, 3, 7};
  const std::vector<float> table = random_uniform(vocab * d_model, 2);
  const std::vector<int32_t> ids = {1, 2, 3, kPad, 5, 5, 1, kPad, 4, 2, 2, 3};
  std::vector<float> fused(rows * d_model), separate = embed(ids, table, d_model, seq_len, scale);
  Tensor fused_view = view(fused, {rows, d_model});
  embedding_forward(view(ids, {rows}), view(table, {vocab, d_model}), fused_view, seq_len, scale,
                    kPad, EmbeddingDropout{p, key});
  Tensor separate_view = view(separate, {rows, d_model});
  dropout_forward(separate_view, separate_view, p, key);
  CHECK(fused == separate);
  int dropped = 0;
  for (size_t i = 0; i < fused.size(); ++i)
    dropped += fused[i] == 0.0f && ids[i / d_model] != kPad ? 1 : 0;
  CHECK(dropped > 0);

  const std::vector<float> d_out = random_uniform(rows * d_model, 3);
  std::vector<float> d_out_copy = d_out, grad_fused(vocab * d_model, 0.5f),
                     grad_separate = grad_fused;
  Tensor g_fused = view(grad_fused, {vocab, d_model}),
         g_separate = view(grad_separate, {vocab, d_model});
  embedding_backward(view(ids, {rows}), view(d_out_copy, {rows, d_model}), g_fused, scale, kPad,
                     EmbeddingDropout{p, key});
  CHECK(d_out_copy == d_out);  // the op's input is left as it was
  std::vector<float> dropped_grad = d_out;
  Tensor dropped_view = view(dropped_grad, {rows, d_model});
  dropout_backward(dropped_view, dropped_view, p, key);
  embedding_backward(view(ids, {rows}), dropped_view, g_separate, scale, kPad);
  CHECK(grad_fused == grad_separate);
}
