// The backward tails with a bias gradient (kernels/bias_grad_tails.h) on the CPU: dx and db equal
// the unfused pair bit for bit (the element op of elementwise.h, then linear_backward's db from the
// stored dx) at odd shapes, with and without dropout, in place and not, db accumulated onto a
// nonzero value; dropout_forward_positive_bits' bits are y > 0 and the ReLU tail given them on the
// CPU gives what it gives without; and bad arguments are rejected naming the op and the tensor.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bias_grad_tails.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

struct Shape {
  int64_t rows, cols;
};

const Shape kShapes[] = {{1, 3}, {1, 8}, {7, 3}, {7, 8}, {7, 520}, {130, 3}, {130, 8}, {130, 520}};

// db_init + the bias gradient linear_backward computes from dy [rows, cols], its db path: a layer
// of one input (x [rows, 1], w [cols, 1]) keeps the product small.
std::vector<float> linear_bias_grad(const std::vector<float>& dy, Shape s,
                                    const std::vector<float>& db_init) {
  const std::vector<float> x = random_uniform(static_cast<size_t>(s.rows), 5),
                           w = random_uniform(static_cast<size_t>(s.cols), 6);
  std::vector<float> dw(static_cast<size_t>(s.cols)), db = db_init;
  Tensor no_dx, dw_view = view(dw, {s.cols, 1}), db_view = view(db, {s.cols});
  linear_backward(view(dy, {s.rows, s.cols}), view(x, {s.rows, 1}), view(w, {s.cols, 1}), no_dx,
                  dw_view, db_view);
  return db;
}

}  // namespace

TEST_CASE("dropout_backward_bias equals dropout_backward then linear_backward's db bit for bit",
          "[bias_grad_tails][dropout]") {
  const RngKey key{31, 7, 4};
  for (Shape s : kShapes)
    for (float p : {0.0f, 0.3f}) {
      INFO("rows " << s.rows << " cols " << s.cols << " p " << p);
      const auto n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> dy = random_uniform(n, 100 + static_cast<uint32_t>(n)),
                               db_init = random_uniform(static_cast<size_t>(s.cols), 3);
      std::vector<float> expected_dx(n);
      Tensor expected_view = view(expected_dx, {s.rows, s.cols});
      dropout_backward(view(dy, {s.rows, s.cols}), expected_view, p, key);
      const std::vector<float> expected_db = linear_bias_grad(expected_dx, s, db_init);

      std::vector<float> dx(n), db = db_init;
      Tensor dx_view = view(dx, {s.rows, s.cols}), db_view = view(db, {s.cols});
      dropout_backward_bias(view(dy, {s.rows, s.cols}), dx_view, p, key, db_view);
      CHECK(dx == expected_dx);
      CHECK(db == expected_db);

      std::vector<float> in_place = dy, db_in_place = db_init;  // dx over dy
      Tensor in_place_view = view(in_place, {s.rows, s.cols}),
             db_in_place_view = view(db_in_place, {s.cols});
      dropout_backward_bias(in_place_view, in_place_view, p, key, db_in_place_view);
      CHECK(in_place == expected_dx);
      CHECK(db_in_place == expected_db);
    }
}

TEST_CASE("relu_dropout_backward_bias equals relu_dropout_backward then linear_backward's db",
          "[bias_grad_tails][dropout]") {
  const RngKey key{37, 2, 8};
  for (Shape s : kShapes)
    for (float p : {0.0f, 0.3f}) {
      INFO("rows " << s.rows << " cols " << s.cols << " p " << p);
      const auto n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> y =
          relu_then_dropout(random_uniform(n, 200 + static_cast<uint32_t>(n)), p, key);
      const std::vector<float> dy = random_uniform(n, 300 + static_cast<uint32_t>(n)),
                               db_init = random_uniform(static_cast<size_t>(s.cols), 4);
      std::vector<float> expected_dx(n);
      Tensor expected_view = view(expected_dx, {s.rows, s.cols});
      relu_dropout_backward(view(dy, {s.rows, s.cols}), view(y, {s.rows, s.cols}), expected_view,
                            p);
      const std::vector<float> expected_db = linear_bias_grad(expected_dx, s, db_init);

      std::vector<float> dx(n), db = db_init;
      Tensor dx_view = view(dx, {s.rows, s.cols}), db_view = view(db, {s.cols});
      relu_dropout_backward_bias(view(dy, {s.rows, s.cols}), view(y, {s.rows, s.cols}), dx_view, p,
                                 db_view);
      CHECK(dx == expected_dx);
      CHECK(db == expected_db);

      std::vector<float> in_place = dy, db_in_place = db_init;  // dx over dy, as the FFN runs it
      Tensor in_place_view = view(in_place, {s.rows, s.cols}),
             db_in_place_view = view(db_in_place, {s.cols});
      relu_dropout_backward_bias(in_place_view, view(y, {s.rows, s.cols}), in_place_view, p,
                                 db_in_place_view);
      CHECK(in_place == expected_dx);
      CHECK(db_in_place == expected_db);
    }
}

TEST_CASE(
    "dropout_forward_positive_bits: dropout_forward's y and its y > 0 as bits, which the "
    "ReLU tail may be given",
    "[bias_grad_tails][dropout]") {
  const RngKey key{41, 3, 6};
  for (Shape s : kShapes)
    for (float p : {0.0f, 0.3f}) {
      INFO("rows " << s.rows << " cols " << s.cols << " p " << p);
      const auto n = static_cast<size_t>(s.rows * s.cols);
      std::vector<float> x = random_uniform(n, 400 + static_cast<uint32_t>(n));
      for (size_t i = 0; i < n; i += 3) x[i] = std::max(x[i], 0.0f);  // relu-like zeros
      std::vector<float> expected_y(n), y(n);
      Tensor expected_view = view(expected_y, {s.rows, s.cols}), y_view = view(y, {s.rows, s.cols});
      dropout_forward(view(x, {s.rows, s.cols}), expected_view, p, key);
      const int64_t words = dropout_keep_bits_words(s.rows, s.cols);
      std::vector<int32_t> bits(static_cast<size_t>(words), -1);  // every bit set first
      Tensor bits_view(bits.data(), DType::i32, Device::cpu, {words});
      dropout_forward_positive_bits(view(x, {s.rows, s.cols}), y_view, p, key, bits_view);
      CHECK(y == expected_y);
      for (int64_t e = 0; e < 32 * words; ++e) {
        const bool positive = e < static_cast<int64_t>(n) && y[e] > 0.0f;
        REQUIRE(((bits[e / 32] >> (e % 32)) & 1) == (positive ? 1 : 0));
      }

      // The tail with the bits: the CPU reads y, so the same results as without them.
      const std::vector<float> dy = random_uniform(n, 500 + static_cast<uint32_t>(n)),
                               db_init = random_uniform(static_cast<size_t>(s.cols), 7);
      std::vector<float> expected_dx(n), dx(n), expected_db = db_init, db = db_init;
      Tensor expected_dx_view = view(expected_dx, {s.rows, s.cols}),
             expected_db_view = view(expected_db, {s.cols}), dx_view = view(dx, {s.rows, s.cols}),
             db_view = view(db, {s.cols});
      relu_dropout_backward_bias(view(dy, {s.rows, s.cols}), y_view, expected_dx_view, p,
                                 expected_db_view);
      relu_dropout_backward_bias(view(dy, {s.rows, s.cols}), y_view, dx_view, p, db_view,
                                 bits_view);
      CHECK(dx == expected_dx);
      CHECK(db == expected_db);
    }
}

TEST_CASE("the bias-gradient tails reject bad arguments, naming the op and the tensor",
          "[bias_grad_tails][errors]") {
  std::vector<float> dy(12), y(12), dx(12), other(10), db(4), short_db(3);
  Tensor dx_view = view(dx, {3, 4}), db_view = view(db, {4}), short_db_view = view(short_db, {3});
  Tensor other_view = view(other, {2, 5}), flat_dx = view(dx, {12});
  // db over the matrix it sums: the first four elements of dx.
  Tensor db_in_dx(dx.data(), DType::f32, Device::cpu, {4});
  const Tensor dy_view = view(dy, {3, 4}), y_view = view(y, {3, 4}), flat_dy = view(dy, {12});

  CHECK(message_has(
      invalid_argument_message([&] { dropout_backward_bias(dy_view, dx_view, 1.0f, {}, db_view); }),
      "dropout_backward_bias: dropout probability"));
  CHECK(message_has(
      invalid_argument_message([&] { dropout_backward_bias(flat_dy, flat_dx, 0.1f, {}, db_view); }),
      "dropout_backward_bias: dy"));
  CHECK(message_has(invalid_argument_message(
                        [&] { dropout_backward_bias(dy_view, other_view, 0.1f, {}, db_view); }),
                    "dropout_backward_bias: dx"));
  CHECK(message_has(invalid_argument_message(
                        [&] { dropout_backward_bias(dy_view, dx_view, 0.1f, {}, short_db_view); }),
                    "dropout_backward_bias: db"));
  CHECK(message_has(invalid_argument_message(
                        [&] { dropout_backward_bias(dy_view, dx_view, 0.1f, {}, db_in_dx); }),
                    "dropout_backward_bias: db"));

  CHECK(message_has(invalid_argument_message([&] {
                      relu_dropout_backward_bias(dy_view, y_view, dx_view, -0.5f, db_view);
                    }),
                    "relu_dropout_backward_bias: dropout probability"));
  CHECK(message_has(invalid_argument_message([&] {
                      relu_dropout_backward_bias(dy_view, other_view, dx_view, 0.1f, db_view);
                    }),
                    "relu_dropout_backward_bias: y"));
  CHECK(message_has(invalid_argument_message([&] {
                      relu_dropout_backward_bias(dy_view, y_view, other_view, 0.1f, db_view);
                    }),
                    "relu_dropout_backward_bias: dx"));
  CHECK(message_has(invalid_argument_message([&] {
                      relu_dropout_backward_bias(dy_view, y_view, dx_view, 0.1f, short_db_view);
                    }),
                    "relu_dropout_backward_bias: db"));

  // Positive bits: one word for 12 elements; two words, f32 words, or words over dx are refused.
  std::vector<int32_t> words(2);
  std::vector<float> f32_word(1);
  Tensor one_word(words.data(), DType::i32, Device::cpu, {1}),
      two_words(words.data(), DType::i32, Device::cpu, {2}),
      float_word(f32_word.data(), DType::f32, Device::cpu, {1}),
      word_in_dx(dx.data(), DType::i32, Device::cpu, {1});
  for (Tensor* bad : {&two_words, &float_word, &word_in_dx}) {
    CHECK(message_has(invalid_argument_message([&] {
                        relu_dropout_backward_bias(dy_view, y_view, dx_view, 0.1f, db_view, *bad);
                      }),
                      "relu_dropout_backward_bias: positive_bits"));
    CHECK(message_has(invalid_argument_message(
                          [&] { dropout_forward_positive_bits(dy_view, dx_view, 0.1f, {}, *bad); }),
                      "dropout_forward_positive_bits: positive_bits"));
  }
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_forward_positive_bits(dy_view, other_view, 0.1f, {}, one_word);
                    }),
                    "dropout_forward_positive_bits: y"));
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_forward_positive_bits(dy_view, dx_view, 1.0f, {}, one_word);
                    }),
                    "dropout_forward_positive_bits: dropout probability"));
  Tensor no_bits;
  CHECK(message_has(invalid_argument_message([&] {
                      dropout_forward_positive_bits(dy_view, dx_view, 0.1f, {}, no_bits);
                    }),
                    "dropout_forward_positive_bits: positive_bits"));
}
