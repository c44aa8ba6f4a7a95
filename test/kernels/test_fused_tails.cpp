// The fused tails of elementwise.h on the CPU: dropout_residual_add and relu_dropout_backward equal
// the two ops they replace bit for bit (masks, aliasing, p = 0), match finite differences, and
// reject bad input naming the op.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

// a + dropout(b) through the two separate ops.
std::vector<float> two_op_tail(const std::vector<float>& a, std::vector<float> b, float p,
                               const RngKey& key) {
  const auto n = static_cast<int64_t>(a.size());
  std::vector<float> y(a.size());
  Tensor b_view = view(b, {n}), y_view = view(y, {n});
  dropout_forward(b_view, b_view, p, key);
  residual_add(view(a, {n}), b_view, y_view);
  return y;
}

std::vector<float> fused_tail(const std::vector<float>& a, const std::vector<float>& b, float p,
                              const RngKey& key) {
  const auto n = static_cast<int64_t>(a.size());
  std::vector<float> y(a.size());
  Tensor y_view = view(y, {n});
  dropout_residual_add(view(a, {n}), view(b, {n}), y_view, p, key);
  return y;
}

}  // namespace

TEST_CASE("dropout_residual_add equals dropout_forward then residual_add bit for bit",
          "[elementwise][dropout]") {
  const RngKey key{17, 3, 9};
  for (int64_t n : {1, 3, 7, 33, 1000, 70001})
    for (float p : {0.0f, 0.1f, 0.5f}) {
      INFO("n " << n << " p " << p);
      const auto count = static_cast<size_t>(n);
      const std::vector<float> a = random_uniform(count, 60 + n), b = random_uniform(count, 61 + n);
      const std::vector<float> expected = two_op_tail(a, b, p, key);
      CHECK(fused_tail(a, b, p, key) == expected);
      // y over a, and y over b.
      std::vector<float> over_a = a, over_b = b;
      Tensor a_view = view(over_a, {n}), b_view = view(over_b, {n});
      dropout_residual_add(a_view, view(b, {n}), a_view, p, key);
      dropout_residual_add(view(a, {n}), b_view, b_view, p, key);
      CHECK(over_a == expected);
      CHECK(over_b == expected);
    }
}

TEST_CASE("dropout_residual_add's gradient: dy to a, the regenerated mask to b",
          "[elementwise][dropout][gradcheck]") {
  const RngKey key{5, 8, 13};
  const float p = 0.3f;
  for (int64_t n : {1, 7, 33}) {
    const auto count = static_cast<size_t>(n);
    const std::vector<float> a = random_uniform(count, 70 + n), b = random_uniform(count, 71 + n);
    const std::vector<float> weights = random_uniform(count, 72 + n);
    std::vector<float> db(count);
    Tensor db_view = view(db, {n});
    dropout_backward(view(weights, {n}), db_view, p, key);
    const GradCheckOptions linear_step{0.25, 1e-2, 0};  // linear for a fixed mask
    const auto da = check_gradient(
        [&](const std::vector<float>& v) {
          return weighted_sum(fused_tail(v, b, p, key), weights);
        },
        a, weights, linear_step);
    const auto dbr = check_gradient(
        [&](const std::vector<float>& v) {
          return weighted_sum(fused_tail(a, v, p, key), weights);
        },
        b, db, linear_step);
    INFO("n " << n << ": da " << da.describe() << "; db " << dbr.describe());
    CHECK(da.max_rel_error < 1e-3);
    CHECK(dbr.max_rel_error < 1e-3);
  }
}

TEST_CASE("relu_dropout_backward equals dropout_backward then relu_backward bit for bit",
          "[elementwise][dropout]") {
  const RngKey key{23, 4, 2};
  for (int64_t n : {1, 3, 7, 33, 1000, 70001})
    for (float p : {0.0f, 0.1f, 0.5f}) {
      INFO("n " << n << " p " << p);
      const auto count = static_cast<size_t>(n);
      const std::vector<float> z = random_uniform(count, 80 + n);
      std::vector<float> dy = random_uniform(count, 81 + n);
      const std::vector<float> y = relu_then_dropout(z, p, key);
      std::vector<float> expected = dy;
      Tensor e_view = view(expected, {n});
      dropout_backward(e_view, e_view, p, key);
      relu_backward(e_view, view(y, {n}), e_view);
      std::vector<float> got(count);
      Tensor got_view = view(got, {n});
      relu_dropout_backward(view(dy, {n}), view(y, {n}), got_view, p);
      CHECK(got == expected);
      Tensor dy_view = view(dy, {n});
      relu_dropout_backward(dy_view, view(y, {n}), dy_view, p);  // dx over dy
      CHECK(dy == expected);
    }
}

TEST_CASE("relu_dropout_backward matches finite differences of dropout(relu(z))",
          "[elementwise][dropout][gradcheck]") {
  const RngKey key{29, 6, 1};
  const float p = 0.25f;
  for (int64_t n : {1, 3, 13, 33}) {
    const auto count = static_cast<size_t>(n);
    std::vector<float> z = random_uniform(count, 90 + n);
    for (float& v : z)
      if (std::fabs(v) < 0.05f) v = 0.05f;  // the central difference must not straddle the kink
    const std::vector<float> weights = random_uniform(count, 91 + n);
    const std::vector<float> y = relu_then_dropout(z, p, key);
    std::vector<float> dz(count);
    Tensor dz_view = view(dz, {n});
    relu_dropout_backward(view(weights, {n}), view(y, {n}), dz_view, p);
    const auto result = check_gradient(
        [&](const std::vector<float>& v) {
          return weighted_sum(relu_then_dropout(v, p, key), weights);
        },
        z, dz);
    INFO("n " << n << ": " << result.describe());
    CHECK(result.max_rel_error < 1e-3);
  }
}

TEST_CASE("the fused tails reject bad p and mismatched shapes, naming the op",
          "[elementwise][dropout][errors]") {
  std::vector<float> a(6), b(6), c(5), y(6);
  Tensor y_view = view(y, {6}), c_view = view(c, {5});
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_residual_add(view(a, {6}), view(b, {6}), y_view, 1.0f, {});
                    }),
                    "dropout_residual_add: dropout probability"));
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_residual_add(view(a, {6}), view(c, {5}), y_view, 0.1f, {});
                    }),
                    "dropout_residual_add"));
  CHECK(message_has(invalid_argument_message(
                        [&] { relu_dropout_backward(view(a, {6}), view(b, {6}), c_view, 0.1f); }),
                    "relu_dropout_backward"));
  CHECK(message_has(invalid_argument_message(
                        [&] { relu_dropout_backward(view(a, {6}), view(b, {6}), y_view, -0.5f); }),
                    "relu_dropout_backward: dropout probability"));
}
