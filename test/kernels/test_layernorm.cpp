// Layer normalisation: normalised statistics, gradients of x, gamma and beta, shape errors.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/layernorm.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr float kEps = 1e-5f;

struct Normalised {
  std::vector<float> y, mean, rstd;
};

Normalised normalise(const std::vector<float>& x, const std::vector<float>& gamma,
                     const std::vector<float>& beta, int64_t rows, int64_t d) {
  Normalised n{std::vector<float>(x.size()), std::vector<float>(static_cast<size_t>(rows)),
               std::vector<float>(static_cast<size_t>(rows))};
  Tensor y = view(n.y, {rows, d}), mean = view(n.mean, {rows}), rstd = view(n.rstd, {rows});
  layernorm_forward(view(x, {rows, d}), view(gamma, {d}), view(beta, {d}), y, mean, rstd, kEps);
  return n;
}

}  // namespace

TEST_CASE("layernorm output has mean 0 and variance 1 before the affine", "[layernorm]") {
  const int64_t rows = 5, d = 33;
  // A large offset checks that the variance does not cancel catastrophically.
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * d), 1, 99.0f, 101.0f);
  const Normalised n =
      normalise(x, std::vector<float>(d, 1.0f), std::vector<float>(d, 0.0f), rows, d);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, squares = 0, x_sum = 0;
    for (int64_t i = 0; i < d; ++i) {
      sum += n.y[static_cast<size_t>(r * d + i)];
      x_sum += x[static_cast<size_t>(r * d + i)];
    }
    for (int64_t i = 0; i < d; ++i) {
      const double centred = n.y[static_cast<size_t>(r * d + i)] - sum / d;
      squares += centred * centred;
    }
    CHECK(sum / d == Approx(0.0).margin(1e-4));
    CHECK(squares / d == Approx(1.0).epsilon(1e-3));  // eps shrinks it by eps / var ~ 3e-5
    CHECK(n.mean[static_cast<size_t>(r)] == Approx(x_sum / d).epsilon(1e-6));
  }
}

TEST_CASE("layernorm applies gamma and beta", "[layernorm]") {
  const int64_t rows = 3, d = 7;
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * d), 2);
  const std::vector<float> gamma = random_uniform(d, 3), beta = random_uniform(d, 4);
  const Normalised plain =
      normalise(x, std::vector<float>(d, 1.0f), std::vector<float>(d, 0.0f), rows, d);
  const Normalised affine = normalise(x, gamma, beta, rows, d);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) {
      const size_t at = static_cast<size_t>(r * d + i);
      CHECK(affine.y[at] == Approx(plain.y[at] * gamma[i] + beta[i]).margin(1e-6));
    }
}

TEST_CASE("layernorm backward matches finite differences", "[layernorm][gradcheck]") {
  const auto shape = GENERATE(std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 3},
                              std::vector<int64_t>{3, 7}, std::vector<int64_t>{7, 13},
                              std::vector<int64_t>{2, 33}, std::vector<int64_t>{13, 64});
  const int64_t rows = shape[0], d = shape[1];
  const size_t n = static_cast<size_t>(rows * d);
  const std::vector<float> x = random_uniform(n, 10 + static_cast<uint32_t>(n));
  const std::vector<float> gamma = random_uniform(d, 11, 0.5f, 1.5f);
  const std::vector<float> beta = random_uniform(d, 12);
  const std::vector<float> weights = random_uniform(n, 13);

  const Normalised fwd = normalise(x, gamma, beta, rows, d);
  std::vector<float> dx(n), d_gamma(d, 0.5f), d_beta(d, 0.5f);  // 0.5: checks the +=
  Tensor dx_view = view(dx, {rows, d}), dg_view = view(d_gamma, {d}), db_view = view(d_beta, {d});
  layernorm_backward(view(weights, {rows, d}), view(x, {rows, d}), view(gamma, {d}),
                     view(fwd.mean, {rows}), view(fwd.rstd, {rows}), dx_view, dg_view, db_view);
  for (float& g : d_gamma) g -= 0.5f;
  for (float& g : d_beta) g -= 0.5f;

  // eps 1e-2: inputs are O(1) with row std ~0.6, so the truncation error (~eps^2 / std^3) stays
  // ~1e-4, while a smaller step would let the fp32 rounding of every output of the row (~1e-7
  // each, divided by 2 eps) dominate.
  const GradCheckOptions options{1e-2, 1e-2, 0};
  const auto dx_result = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(normalise(v, gamma, beta, rows, d).y, weights);
      },
      x, dx, options);
  const auto dg_result = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(normalise(x, v, beta, rows, d).y, weights);
      },
      gamma, d_gamma, options);
  const auto db_result = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(normalise(x, gamma, v, rows, d).y, weights);
      },
      beta, d_beta, options);
  INFO("rows " << rows << " d " << d);
  INFO("dx " << dx_result.describe());
  INFO("d_gamma " << dg_result.describe());
  INFO("d_beta " << db_result.describe());
  CHECK(dx_result.max_rel_error < 1e-2);
  CHECK(dg_result.max_rel_error < 1e-2);
  CHECK(db_result.max_rel_error < 1e-2);

  // dx may be written over dy.
  std::vector<float> in_place = weights, unused_g(d), unused_b(d);
  Tensor in_place_view = view(in_place, {rows, d}), ug = view(unused_g, {d}),
         ub = view(unused_b, {d});
  layernorm_backward(in_place_view, view(x, {rows, d}), view(gamma, {d}), view(fwd.mean, {rows}),
                     view(fwd.rstd, {rows}), in_place_view, ug, ub);
  CHECK(in_place == dx);
}

TEST_CASE("layernorm rejects mismatched shapes, naming the op", "[layernorm][errors]") {
  const std::vector<float> x(12), gamma(4), short_gamma(3);
  std::vector<float> y(12), mean(3), rstd(3), dx(12), dg(4);
  Tensor y_view = view(y, {3, 4}), mean_view = view(mean, {3}), rstd_view = view(rstd, {3});
  Tensor dx_view = view(dx, {3, 4}), dg_view = view(dg, {4});
  std::string message = invalid_argument_message([&] {
    layernorm_forward(view(x, {3, 4}), view(short_gamma, {3}), view(gamma, {4}), y_view, mean_view,
                      rstd_view, kEps);
  });
  CHECK(message.find("layernorm_forward") != std::string::npos);
  CHECK(message.find("gamma") != std::string::npos);
  message = invalid_argument_message([&] {
    layernorm_backward(view(x, {3, 4}), view(x, {3, 4}), view(gamma, {4}), view(mean, {3}),
                       view(rstd, {3}), dx_view, dg_view, rstd_view);  // rstd: [3] as d_beta
  });
  CHECK(message.find("layernorm_backward") != std::string::npos);
  CHECK(message.find("d_beta") != std::string::npos);
}
