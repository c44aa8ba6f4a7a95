// The dropout mask saved as bits (kernels/philox.h) on the CPU, which neither stores nor reads it:
// dropout_keep_bits_words sizes it; dropout_residual_layernorm_forward returns false and leaves
// keep_bits alone; the LayerNorm backward tails and dropout_backward_bias given keep_bits (even
// zeroed ones) draw the mask, so their results are the bits of the calls without; a keep_bits of
// the wrong size or dtype, or over memory the op writes, gives one std::invalid_argument naming the
// op, before anything is written.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bias_grad_tails.h"
#include "kernels/layernorm.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr float kEps = 1e-5f;

}  // namespace

TEST_CASE("dropout_keep_bits_words holds one bit an element, in whole words",
          "[dropout][keep_bits]") {
  CHECK(dropout_keep_bits_words(0, 512) == 0);
  CHECK(dropout_keep_bits_words(1, 8) == 1);
  CHECK(dropout_keep_bits_words(4, 8) == 1);
  CHECK(dropout_keep_bits_words(5, 8) == 2);
  CHECK(dropout_keep_bits_words(3, 520) == 49);
  CHECK(dropout_keep_bits_words(8192, 512) == 8192 * 512 / 32);
}

TEST_CASE("the CPU LayerNorm tails neither store nor read the mask bits: the same results",
          "[layernorm][dropout][keep_bits]") {
  const int64_t rows = 33, d = 520;
  const auto n = static_cast<size_t>(rows * d);
  const RngKey key{53, 17, 9};
  const float p = 0.3f;
  const std::vector<float> residual = random_uniform(n, 1, 1.0f, 3.0f),
                           branch = random_uniform(n, 2), gamma = random_uniform(d, 3, 0.5f, 1.5f),
                           beta = random_uniform(d, 4), dy = random_uniform(n, 5),
                           grad_init = random_uniform(d, 6);
  const auto words = static_cast<size_t>(dropout_keep_bits_words(rows, d));

  // Forward: false, keep_bits untouched, the outputs of the call without it.
  std::vector<float> sum(n), y(n), mean(rows), rstd(rows), sum2(n), y2(n), mean2(rows), rstd2(rows);
  Tensor sum_view = view(sum, {rows, d}), y_view = view(y, {rows, d}),
         mean_view = view(mean, {rows}), rstd_view = view(rstd, {rows});
  Tensor sum2_view = view(sum2, {rows, d}), y2_view = view(y2, {rows, d}),
         mean2_view = view(mean2, {rows}), rstd2_view = view(rstd2, {rows});
  std::vector<int32_t> keep(words, -1);
  CHECK_FALSE(dropout_residual_layernorm_forward(
      view(residual, {rows, d}), view(branch, {rows, d}), sum_view, p, key, view(gamma, {d}),
      view(beta, {d}), y_view, mean_view, rstd_view, kEps));
  CHECK_FALSE(dropout_residual_layernorm_forward(view(residual, {rows, d}), view(branch, {rows, d}),
                                                 sum2_view, p, key, view(gamma, {d}),
                                                 view(beta, {d}), y2_view, mean2_view, rstd2_view,
                                                 kEps, view(keep, {static_cast<int64_t>(words)})));
  CHECK(keep == std::vector<int32_t>(words, -1));
  CHECK(bits(sum2) == bits(sum));
  CHECK(bits(y2) == bits(y));
  CHECK(bits(mean2) == bits(mean));
  CHECK(bits(rstd2) == bits(rstd));

  // Backward with zeroed bits: the CPU draws the mask, so nothing is dropped that the key keeps.
  const std::vector<int32_t> zero_bits(words, 0);
  const Tensor zeros = view(zero_bits, {static_cast<int64_t>(words)});
  for (bool add : {false, true}) {
    INFO((add ? "layernorm_backward_add_dropout_bias" : "layernorm_backward_dropout_bias"));
    struct Out {
      std::vector<float> dx, d_gamma, d_beta, d_branch, d_branch_bias;
    };
    const auto run = [&](const Tensor& keep_bits) {
      Out out{std::vector<float>(n), grad_init, grad_init, std::vector<float>(n), grad_init};
      Tensor dx = view(out.dx, {rows, d}), d_gamma = view(out.d_gamma, {d}),
             d_beta = view(out.d_beta, {d}), d_branch = view(out.d_branch, {rows, d}),
             d_branch_bias = view(out.d_branch_bias, {d});
      if (add)
        layernorm_backward_add_dropout_bias(view(dy, {rows, d}), sum_view, view(gamma, {d}),
                                            mean_view, rstd_view, view(residual, {rows, d}), dx,
                                            d_gamma, d_beta, d_branch, p, key, d_branch_bias,
                                            keep_bits);
      else
        layernorm_backward_dropout_bias(view(dy, {rows, d}), sum_view, view(gamma, {d}), mean_view,
                                        rstd_view, dx, d_gamma, d_beta, d_branch, p, key,
                                        d_branch_bias, keep_bits);
      return out;
    };
    const Out drawn = run(Tensor()), given = run(zeros);
    CHECK(bits(given.dx) == bits(drawn.dx));
    CHECK(bits(given.d_gamma) == bits(drawn.d_gamma));
    CHECK(bits(given.d_beta) == bits(drawn.d_beta));
    CHECK(bits(given.d_branch) == bits(drawn.d_branch));
    CHECK(bits(given.d_branch_bias) == bits(drawn.d_branch_bias));
  }
  std::vector<float> dx(n), dx2(n), db = grad_init, db2 = grad_init;
  Tensor dx_view = view(dx, {rows, d}), dx2_view = view(dx2, {rows, d}), db_view = view(db, {d}),
         db2_view = view(db2, {d});
  dropout_backward_bias(view(dy, {rows, d}), dx_view, p, key, db_view);
  dropout_backward_bias(view(dy, {rows, d}), dx2_view, p, key, db2_view, zeros);
  CHECK(bits(dx2) == bits(dx));
  CHECK(bits(db2) == bits(db));
}

TEST_CASE("keep_bits of the wrong size or dtype, or over written memory, are rejected",
          "[layernorm][dropout][keep_bits][errors]") {
  const int64_t rows = 3, d = 64;
  const auto n = static_cast<size_t>(rows * d);
  const int64_t words = dropout_keep_bits_words(rows, d);  // 6
  const std::vector<float> residual(n, 1.0f), branch(n, 0.5f), gamma(d, 1.0f), beta(d, 0.0f),
      mean(rows, 0.0f), rstd(rows, 1.0f), dy(n, 0.25f);
  std::vector<float> sum(n, 7.0f), y(n, 7.0f), stats(rows, 7.0f), stats2(rows, 7.0f), dx(n, 7.0f),
      d_gamma(d, 7.0f), d_beta(d, 7.0f), d_branch(n, 7.0f), d_branch_bias(d, 7.0f);
  std::vector<int32_t> short_words(static_cast<size_t>(words - 1)),
      good_words(static_cast<size_t>(words));
  std::vector<float> float_words(static_cast<size_t>(words));
  Tensor sum_view = view(sum, {rows, d}), y_view = view(y, {rows, d}),
         mean_view = view(stats, {rows}), rstd_view = view(stats2, {rows}),
         dx_view = view(dx, {rows, d}), d_gamma_view = view(d_gamma, {d}),
         d_beta_view = view(d_beta, {d}), d_branch_view = view(d_branch, {rows, d}),
         d_branch_bias_view = view(d_branch_bias, {d});
  const auto forward = [&](const Tensor& keep_bits) {
    return invalid_argument_message([&] {
      dropout_residual_layernorm_forward(view(residual, {rows, d}), view(branch, {rows, d}),
                                         sum_view, 0.1f, {}, view(gamma, {d}), view(beta, {d}),
                                         y_view, mean_view, rstd_view, kEps, keep_bits);
    });
  };
  CHECK(message_has(forward(view(short_words, {words - 1})),
                    "dropout_residual_layernorm_forward: keep_bits has shape [5] i32 cpu, "
                    "expected [6]"));
  CHECK(message_has(forward(view(float_words, {words})),
                    "dropout_residual_layernorm_forward: keep_bits must be i32"));
  CHECK(message_has(forward(Tensor(sum.data(), DType::i32, Device::cpu, {words})),
                    "dropout_residual_layernorm_forward: keep_bits [6] i32 cpu must not overlap "
                    "sum"));
  CHECK(message_has(forward(Tensor(good_words.data(), DType::i32, Device::cuda, {words})),
                    "dropout_residual_layernorm_forward: tensors on different devices"));
  const Tensor over_d_branch(d_branch.data(), DType::i32, Device::cpu, {words});
  CHECK(message_has(invalid_argument_message([&] {
                      layernorm_backward_dropout_bias(
                          view(dy, {rows, d}), view(residual, {rows, d}), view(gamma, {d}),
                          view(mean, {rows}), view(rstd, {rows}), dx_view, d_gamma_view,
                          d_beta_view, d_branch_view, 0.1f, {}, d_branch_bias_view, over_d_branch);
                    }),
                    "layernorm_backward_dropout_bias: keep_bits [6] i32 cpu must not overlap "
                    "d_branch"));
  CHECK(message_has(invalid_argument_message([&] {
                      layernorm_backward_add_dropout_bias(
                          view(dy, {rows, d}), view(residual, {rows, d}), view(gamma, {d}),
                          view(mean, {rows}), view(rstd, {rows}), view(branch, {rows, d}), dx_view,
                          d_gamma_view, d_beta_view, d_branch_view, 0.1f, {}, d_branch_bias_view,
                          Tensor(dx.data(), DType::i32, Device::cpu, {words}));
                    }),
                    "layernorm_backward_add_dropout_bias: keep_bits [6] i32 cpu must not overlap "
                    "dx"));
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_backward_bias(view(dy, {rows, d}), d_branch_view, 0.1f, {},
                                            d_branch_bias_view, view(short_words, {words - 1}));
                    }),
                    "dropout_backward_bias: keep_bits has shape [5] i32 cpu, expected [6]"));
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_backward_bias(view(dy, {rows, d}), d_branch_view, 0.1f, {},
                                            d_branch_bias_view, over_d_branch);
                    }),
                    "dropout_backward_bias: keep_bits [6] i32 cpu must not overlap dx"));
  // Nothing was written by any of the failed calls.
  CHECK(sum == std::vector<float>(n, 7.0f));
  CHECK(y == std::vector<float>(n, 7.0f));
  CHECK(dx == std::vector<float>(n, 7.0f));
  CHECK(d_branch == std::vector<float>(n, 7.0f));
  CHECK(d_branch_bias == std::vector<float>(d, 7.0f));
  CHECK(d_gamma == std::vector<float>(d, 7.0f));
}
