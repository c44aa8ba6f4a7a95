// linear_weight_grads on the CPU: each product's dW as linear_backward adds it (the same bits), and
// the checks that name the op.
#include <string>
#include <vector>

#include "kernels/linear.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

TEST_CASE("linear_weight_grads adds each product's dW as linear_backward does", "[linear]") {
  const int64_t rows = 7, in = 5, out = 3;
  for (int count : {1, 2, 3}) {
    INFO("products " << count);
    std::vector<std::vector<float>> xs, dys, batched, separate;
    for (int i = 0; i < count; ++i) {
      xs.push_back(random_uniform(rows * in, 10 + i));
      dys.push_back(random_uniform(rows * out, 20 + i));
      batched.push_back(random_uniform(out * in, 30 + i));  // += onto what is there
      separate.push_back(batched.back());
    }
    std::vector<WeightGradProduct> products;
    for (int i = 0; i < count; ++i)
      products.push_back(
          {view(dys[i], {rows, out}), view(xs[i], {rows, in}), view(batched[i], {out, in})});
    linear_weight_grads(products);
    const std::vector<float> w(out * in, 0.5f);
    for (int i = 0; i < count; ++i) {
      Tensor no_dx, no_db, dw = view(separate[i], {out, in});
      linear_backward(view(dys[i], {rows, out}), view(xs[i], {rows, in}), view(w, {out, in}), no_dx,
                      dw, no_db);
      CHECK(batched[i] == separate[i]);
    }
  }
}

TEST_CASE("linear_backward with an empty dw leaves the weight gradient to linear_weight_grads",
          "[linear]") {
  const int64_t rows = 4, in = 3, out = 2;
  const std::vector<float> x = random_uniform(rows * in, 1), dy = random_uniform(rows * out, 2),
                           w = random_uniform(out * in, 3);
  std::vector<float> dx(rows * in), dx_ref(rows * in), dw_ref(out * in, 0.0f), db(out, 0.0f),
      db_ref(out, 0.0f);
  Tensor dx_view = view(dx, {rows, in}), no_dw, db_view = view(db, {out});
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), dx_view, no_dw,
                  db_view);
  Tensor dx_ref_view = view(dx_ref, {rows, in}), dw_ref_view = view(dw_ref, {out, in}),
         db_ref_view = view(db_ref, {out});
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), dx_ref_view,
                  dw_ref_view, db_ref_view);
  CHECK(dx == dx_ref);
  CHECK(db == db_ref);
}

TEST_CASE("linear_weight_grads rejects mixed shapes, too many products and overlapping outputs",
          "[linear][errors]") {
  std::vector<float> x(12), dy(8), dw(6), other_x(15), dw2(6);
  const WeightGradProduct good{view(dy, {4, 2}), view(x, {4, 3}), view(dw, {2, 3})};
  CHECK(invalid_argument_message([&] {
          linear_weight_grads({good, {view(dy, {4, 2}), view(other_x, {5, 3}), view(dw2, {2, 3})}});
        }).find("linear_weight_grads: x") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          linear_weight_grads(std::vector<WeightGradProduct>(kMaxWeightGradBatch + 1, good));
        }).find("at most") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          linear_weight_grads({good, good});
        }).find("linear_weight_grads: dw") != std::string::npos);
}
