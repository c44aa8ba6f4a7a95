// Linear layer: values against a double reference, gradients of x, W and b, optional outputs,
// thread-count independence, shape errors.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kernels/bias_grad_tails.h"
#include "kernels/linear.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& b, int64_t rows, int64_t in, int64_t out) {
  std::vector<float> y(static_cast<size_t>(rows * out));
  Tensor y_view = view(y, {rows, out});
  linear_forward(view(x, {rows, in}), view(w, {out, in}), b.empty() ? Tensor() : view(b, {out}),
                 y_view);
  return y;
}

struct Grads {
  std::vector<float> dx, dw, db;
};

Grads backward(const std::vector<float>& dy, const std::vector<float>& x,
               const std::vector<float>& w, int64_t rows, int64_t in, int64_t out) {
  Grads g{std::vector<float>(x.size()), std::vector<float>(w.size()),
          std::vector<float>(static_cast<size_t>(out))};
  Tensor dx = view(g.dx, {rows, in}), dw = view(g.dw, {out, in}), db = view(g.db, {out});
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), dx, dw, db);
  return g;
}

}  // namespace

TEST_CASE("linear_forward equals a double-precision reference", "[linear]") {
  // 70 outputs cross a 64-column strip; 37 rows leave a partial block of 4.
  const int64_t rows = 37, in = 65, out = 70;
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 1);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 2);
  const std::vector<float> b = random_uniform(static_cast<size_t>(out), 3);
  const std::vector<float> y = forward(x, w, b, rows, in, out);
  const std::vector<float> y_no_bias = forward(x, w, {}, rows, in, out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double dot = 0;
      for (int64_t i = 0; i < in; ++i)
        dot += static_cast<double>(x[static_cast<size_t>(r * in + i)]) *
               w[static_cast<size_t>(o * in + i)];
      const size_t at = static_cast<size_t>(r * out + o);
      REQUIRE(y[at] == Approx(dot + b[static_cast<size_t>(o)]).margin(1e-5));
      REQUIRE(y_no_bias[at] == Approx(dot).margin(1e-5));
    }
}

TEST_CASE("linear_backward matches finite differences", "[linear][gradcheck]") {
  const auto shape = GENERATE(std::vector<int64_t>{1, 1, 1}, std::vector<int64_t>{3, 7, 13},
                              std::vector<int64_t>{13, 33, 7}, std::vector<int64_t>{6, 5, 70},
                              std::vector<int64_t>{5, 70, 3});
  const int64_t rows = shape[0], in = shape[1], out = shape[2];
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 4);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 5);
  const std::vector<float> b = random_uniform(static_cast<size_t>(out), 6);
  const std::vector<float> weights = random_uniform(static_cast<size_t>(rows * out), 7);
  const Grads g = backward(weights, x, w, rows, in, out);

  // The op is linear in each argument, so the central difference has no truncation error and a
  // large step only divides the fp32 rounding of the outputs: eps 0.25 makes the check tight.
  const GradCheckOptions linear_step{0.25, 1e-2, 0};
  const auto dx = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(forward(v, w, b, rows, in, out), weights);
      },
      x, g.dx, linear_step);
  const auto dw = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(forward(x, v, b, rows, in, out), weights);
      },
      w, g.dw, linear_step);
  const auto db = check_gradient(
      [&](const std::vector<float>& v) {
        return weighted_sum(forward(x, w, v, rows, in, out), weights);
      },
      b, g.db, linear_step);
  INFO("rows " << rows << " in " << in << " out " << out);
  INFO("dx " << dx.describe());
  INFO("dw " << dw.describe());
  INFO("db " << db.describe());
  CHECK(dx.max_rel_error < 1e-3);
  CHECK(dw.max_rel_error < 1e-3);
  CHECK(db.max_rel_error < 1e-3);
}

TEST_CASE("linear_backward accumulates dw and db and may skip dx and db", "[linear]") {
  const int64_t rows = 7, in = 3, out = 13;
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 8);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 9);
  const std::vector<float> dy = random_uniform(static_cast<size_t>(rows * out), 10);
  const Grads fresh = backward(dy, x, w, rows, in, out);

  std::vector<float> dw(w.size(), 2.0f), db(static_cast<size_t>(out), 2.0f);
  Tensor no_dx, no_db, dw_view = view(dw, {out, in}), db_view = view(db, {out});
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), no_dx, dw_view,
                  db_view);
  for (size_t i = 0; i < dw.size(); ++i) CHECK(dw[i] == Approx(fresh.dw[i] + 2.0f));
  for (size_t i = 0; i < db.size(); ++i) CHECK(db[i] == Approx(fresh.db[i] + 2.0f));

  std::vector<float> dw_only(w.size(), 0.0f);
  Tensor dw_only_view = view(dw_only, {out, in});
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), no_dx,
                  dw_only_view, no_db);
  CHECK(dw_only == fresh.dw);
}

TEST_CASE("linear_backward adds dx onto what it holds when asked", "[linear]") {
  // The post-norm sublayer stores the residual's gradient in dx first and lets the block's last
  // product add its own: dx must end as the old value plus the product formed from zero, the bits
  // a separate residual_add of the written dx gave.
  const int64_t rows = 37, in = 65, out = 19;
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 21);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 22);
  const std::vector<float> dy = random_uniform(static_cast<size_t>(rows * out), 23);
  const std::vector<float> residual = random_uniform(static_cast<size_t>(rows * in), 24);
  const Grads fresh = backward(dy, x, w, rows, in, out);

  std::vector<float> dx = residual, dw(w.size(), 0.0f);
  Tensor dx_view = view(dx, {rows, in}), dw_view = view(dw, {out, in}), no_db;
  linear_backward(view(dy, {rows, out}), view(x, {rows, in}), view(w, {out, in}), dx_view, dw_view,
                  no_db, DxWrite::add);
  for (size_t i = 0; i < dx.size(); ++i) CHECK(dx[i] == residual[i] + fresh.dx[i]);
  CHECK(dw == fresh.dw);

  // No columns to sum over (out = 0): adding leaves dx as it was, writing zeroes it.
  std::vector<float> kept = residual, zeroed = residual, dw_empty, dy_empty;
  Tensor kept_view = view(kept, {rows, in}), zeroed_view = view(zeroed, {rows, in});
  Tensor dw_none = view(dw_empty, {0, in});
  linear_backward(view(dy_empty, {rows, 0}), view(x, {rows, in}), view(dw_empty, {0, in}),
                  kept_view, dw_none, no_db, DxWrite::add);
  CHECK(kept == residual);
  linear_backward(view(dy_empty, {rows, 0}), view(x, {rows, in}), view(dw_empty, {0, in}),
                  zeroed_view, dw_none, no_db, DxWrite::assign);
  CHECK(zeroed == std::vector<float>(residual.size(), 0.0f));

  // dx over one of the product's inputs is refused, naming both, before anything is written.
  std::vector<float> x_copy = x;
  Tensor x_view = view(x_copy, {rows, in});
  std::string message;
  try {
    linear_backward(view(dy, {rows, out}), x_view, view(w, {out, in}), x_view, dw_view, no_db,
                    DxWrite::add);
  } catch (const std::invalid_argument& e) {
    message = e.what();
  }
  CHECK(message.find("linear_backward: dx") != std::string::npos);
  CHECK(message.find("must not overlap x") != std::string::npos);
  CHECK(x_copy == x);
}

#if defined(_OPENMP)
TEST_CASE("linear results do not depend on the thread count", "[linear][determinism]") {
  const int64_t rows = 301, in = 67, out = 129;
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 11);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 12);
  const std::vector<float> b = random_uniform(static_cast<size_t>(out), 13);
  const std::vector<float> dy = random_uniform(static_cast<size_t>(rows * out), 14);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> y1 = forward(x, w, b, rows, in, out);
  const Grads g1 = backward(dy, x, w, rows, in, out);
  omp_set_num_threads(3);  // more threads than this machine may have: a different split
  const std::vector<float> y3 = forward(x, w, b, rows, in, out);
  const Grads g3 = backward(dy, x, w, rows, in, out);
  omp_set_num_threads(threads);
  CHECK(y1 == y3);
  CHECK(g1.dx == g3.dx);
  CHECK(g1.dw == g3.dw);
  CHECK(g1.db == g3.db);
}
#endif

TEST_CASE("linear ops reject mismatched shapes and dtypes, naming the op", "[linear][errors]") {
  const std::vector<float> x(12), w(8), b(3);
  const std::vector<int32_t> x_int(12);
  std::vector<float> y(6), dx(12), dw(8), db(2);
  Tensor y_view = view(y, {3, 2}), dx_view = view(dx, {3, 4}), dw_view = view(dw, {2, 4});
  Tensor db_view = view(db, {2});
  std::string message = invalid_argument_message([&] {
    linear_forward(view(x, {3, 4}), view(w, {4, 2}), Tensor(), y_view);
  });
  CHECK(message.find("linear_forward") != std::string::npos);
  message = invalid_argument_message([&] {
    linear_forward(view(x, {3, 4}), view(w, {2, 4}), view(b, {3}), y_view);
  });
  CHECK(message.find("linear_forward: b") != std::string::npos);
  message = invalid_argument_message([&] {
    linear_forward(view(x_int, {3, 4}), view(w, {2, 4}), Tensor(), y_view);
  });
  CHECK(message.find("linear_forward: x must be f32") != std::string::npos);
  message = invalid_argument_message([&] {
    linear_backward(view(y, {2, 3}), view(x, {3, 4}), view(w, {2, 4}), dx_view, dw_view, db_view);
  });
  CHECK(message.find("linear_backward: dy") != std::string::npos);
}

TEST_CASE("linear_relu_forward on the CPU is the product followed by the ReLU", "[cpu][linear]") {
  const int64_t rows = 5, in = 7, out = 3;
  std::vector<float> x(rows * in), w(out * in), b(out), y(rows * out), expected(rows * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(3 * i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i) - 0.1f;
  nmt::Tensor tx(x.data(), nmt::DType::f32, nmt::Device::cpu, {rows, in});
  nmt::Tensor tw(w.data(), nmt::DType::f32, nmt::Device::cpu, {out, in});
  nmt::Tensor tb(b.data(), nmt::DType::f32, nmt::Device::cpu, {out});
  nmt::Tensor ty(y.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out});
  nmt::Tensor te(expected.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out});
  nmt::linear_forward(tx, tw, tb, te);
  nmt::linear_relu_forward(tx, tw, tb, ty);
  int negatives = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    negatives += expected[i] < 0;
    CHECK(y[i] == (expected[i] > 0 ? expected[i] : 0.0f));
  }
  CHECK(negatives > 0);  // the case exercises the clamp
}

TEST_CASE(
    "linear_relu_dropout_forward on the CPU: the two ops, its bits, and the backward tail's "
    "gradient",
    "[cpu][linear][gradcheck]") {
  const int64_t rows = 6, in = 9, out = 40;  // 240 elements: the bits end on a word
  const float p = 0.3f;
  const nmt::RngKey key{7, 3, 11};
  const std::vector<float> x = random_uniform(static_cast<size_t>(rows * in), 21);
  const std::vector<float> w = random_uniform(static_cast<size_t>(out * in), 22);
  const std::vector<float> b = random_uniform(static_cast<size_t>(out), 23);
  const int64_t words = nmt::dropout_keep_bits_words(rows, out);
  const auto forward = [&](std::vector<float> xv, std::vector<int32_t>* bits_out) {
    std::vector<float> wv = w, bv = b, y(static_cast<size_t>(rows * out));
    std::vector<int32_t> bits(static_cast<size_t>(words), -1);
    nmt::Tensor ty(y.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out});
    nmt::Tensor tbits(bits.data(), nmt::DType::i32, nmt::Device::cpu, {words});
    nmt::linear_relu_dropout_forward(
        nmt::Tensor(xv.data(), nmt::DType::f32, nmt::Device::cpu, {rows, in}),
        nmt::Tensor(wv.data(), nmt::DType::f32, nmt::Device::cpu, {out, in}),
        nmt::Tensor(bv.data(), nmt::DType::f32, nmt::Device::cpu, {out}), p, key, ty, tbits);
    if (bits_out != nullptr) *bits_out = bits;
    return y;
  };
  std::vector<int32_t> bits;
  const std::vector<float> y = forward(x, &bits);
  // The ops it is: the product with the ReLU, then dropout's mask and scale.
  std::vector<float> xv = x, wv = w, bv = b, relu(static_cast<size_t>(rows * out));
  nmt::Tensor trelu(relu.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out});
  nmt::linear_relu_forward(nmt::Tensor(xv.data(), nmt::DType::f32, nmt::Device::cpu, {rows, in}),
                           nmt::Tensor(wv.data(), nmt::DType::f32, nmt::Device::cpu, {out, in}),
                           nmt::Tensor(bv.data(), nmt::DType::f32, nmt::Device::cpu, {out}), trelu);
  int kept_positive = 0, dropped = 0;
  for (int64_t e = 0; e < rows * out; ++e) {
    const bool keep = nmt::dropout_keep(key, static_cast<uint64_t>(e), p);
    CHECK(y[e] == (keep ? relu[e] * (1.0f / (1.0f - p)) : 0.0f));
    CHECK(((static_cast<uint32_t>(bits[e / 32]) >> (e % 32)) & 1u) == (y[e] > 0.0f ? 1u : 0u));
    kept_positive += y[e] > 0.0f;
    dropped += keep ? 0 : 1;
  }
  CHECK(kept_positive > 0);
  CHECK(dropped > 0);
  // Its backward as the feed-forward block runs it: the ReLU tail reading the bits, then the
  // product's dx, against central differences (eps 2e-4: row 0's third pre-activation is 5e-4).
  const std::vector<float> weights = random_uniform(static_cast<size_t>(rows * out), 24);
  std::vector<float> dh = weights, db(static_cast<size_t>(out), 0.0f),
                     dx(static_cast<size_t>(rows * in)), dw(static_cast<size_t>(out * in), 0.0f);
  nmt::Tensor tdh(dh.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out});
  nmt::Tensor tdb(db.data(), nmt::DType::f32, nmt::Device::cpu, {out});
  std::vector<float> yv = y;
  nmt::relu_dropout_backward_bias(
      tdh, nmt::Tensor(yv.data(), nmt::DType::f32, nmt::Device::cpu, {rows, out}), tdh, p, tdb,
      nmt::Tensor(bits.data(), nmt::DType::i32, nmt::Device::cpu, {words}));
  nmt::Tensor tdx(dx.data(), nmt::DType::f32, nmt::Device::cpu, {rows, in}), none;
  nmt::Tensor tdw(dw.data(), nmt::DType::f32, nmt::Device::cpu, {out, in});
  nmt::linear_backward(tdh, nmt::Tensor(xv.data(), nmt::DType::f32, nmt::Device::cpu, {rows, in}),
                       nmt::Tensor(wv.data(), nmt::DType::f32, nmt::Device::cpu, {out, in}), tdx,
                       tdw, none);
  const auto check = check_gradient(
      [&](const std::vector<float>& v) { return weighted_sum(forward(v, nullptr), weights); }, x,
      dx, GradCheckOptions{2e-4, 1e-2, 0});
  INFO("dx " << check.describe());
  CHECK(check.max_rel_error < 2e-2);
}
