// The sublayers' fused LayerNorm tails (kernels/layernorm.h) on the CPU:
// dropout_residual_layernorm_forward equals dropout_residual_add then layernorm_forward,
// layernorm_backward_dropout_bias equals layernorm_backward then dropout_backward_bias, and
// layernorm_backward_add_dropout_bias (pre-norm) equals layernorm_backward_add then
// dropout_backward_bias, bit for bit (every output, at odd shapes and on the multi-threaded path, p
// 0, 0.1 and 0.3, outputs over their allowed inputs); bad arguments give one std::invalid_argument
// naming the op and the tensor, thrown before anything is written.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bias_grad_tails.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr float kEps = 1e-5f;

struct Shape {
  int64_t rows, d;
};

// 1 x 8 and 7 x 64: a row, a few; 3 x 96 and 33 x 520: widths that are no power of two; 129 x 520
// passes the threshold where the CPU loops run on several threads.
const Shape kShapes[] = {{1, 8}, {7, 64}, {3, 96}, {33, 520}, {129, 520}};
const float kDropouts[] = {0.0f, 0.1f, 0.3f};

// --- forward ---------------------------------------------------------------------------------

struct ForwardInputs {
  Shape s;
  std::vector<float> residual, branch;  // [rows, d] each
  std::vector<float> gamma, beta;       // [d] each
};

ForwardInputs forward_inputs(Shape s, uint32_t seed) {
  const auto n = static_cast<size_t>(s.rows * s.d), d = static_cast<size_t>(s.d);
  // A residual well away from 0 gives rows a large mean, as the two-pass variance expects.
  return {s, random_uniform(n, seed, 1.0f, 3.0f), random_uniform(n, seed + 1),
          random_uniform(d, seed + 2, 0.5f, 1.5f), random_uniform(d, seed + 3, -0.5f, 0.5f)};
}

struct ForwardResult {
  std::vector<float> sum, y, mean, rstd;
};

ForwardResult empty_forward(Shape s) {
  const auto n = static_cast<size_t>(s.rows * s.d), rows = static_cast<size_t>(s.rows);
  return {std::vector<float>(n), std::vector<float>(n), std::vector<float>(rows),
          std::vector<float>(rows)};
}

// dropout_residual_add into sum, then layernorm_forward of the stored sum.
ForwardResult two_op_forward(const ForwardInputs& in, float p, const RngKey& key) {
  const int64_t rows = in.s.rows, d = in.s.d;
  ForwardResult out = empty_forward(in.s);
  Tensor sum = view(out.sum, {rows, d}), y = view(out.y, {rows, d});
  Tensor mean = view(out.mean, {rows}), rstd = view(out.rstd, {rows});
  dropout_residual_add(view(in.residual, {rows, d}), view(in.branch, {rows, d}), sum, p, key);
  layernorm_forward(sum, view(in.gamma, {d}), view(in.beta, {d}), y, mean, rstd, kEps);
  return out;
}

enum class SumOver { fresh, residual, branch };

// The fused op, its sum into fresh memory or over a copy of the residual or of the branch.
ForwardResult fused_forward(const ForwardInputs& in, float p, const RngKey& key, SumOver over) {
  const int64_t rows = in.s.rows, d = in.s.d;
  ForwardResult out = empty_forward(in.s);
  std::vector<float> residual = in.residual, branch = in.branch;
  Tensor residual_view = view(residual, {rows, d}), branch_view = view(branch, {rows, d});
  Tensor sum = over == SumOver::residual ? residual_view
               : over == SumOver::branch ? branch_view
                                         : view(out.sum, {rows, d});
  Tensor y = view(out.y, {rows, d}), mean = view(out.mean, {rows}), rstd = view(out.rstd, {rows});
  dropout_residual_layernorm_forward(residual_view, branch_view, sum, p, key, view(in.gamma, {d}),
                                     view(in.beta, {d}), y, mean, rstd, kEps);
  if (over == SumOver::residual) out.sum = residual;
  if (over == SumOver::branch) out.sum = branch;
  return out;
}

// --- backward --------------------------------------------------------------------------------

struct BackwardInputs {
  Shape s;
  std::vector<float> dy, x, gamma, mean, rstd;  // [rows, d], [rows, d], [d], [rows], [rows]
  std::vector<float> grad_init;                 // [d]: d_gamma, d_beta, d_branch_bias start here
  std::vector<float> residual;  // [rows, d]: layernorm_backward_add_dropout_bias's residual
};

BackwardInputs backward_inputs(Shape s, uint32_t seed) {
  const auto n = static_cast<size_t>(s.rows * s.d), d = static_cast<size_t>(s.d);
  BackwardInputs in{s,
                    random_uniform(n, seed),
                    random_uniform(n, seed + 1, -2.0f, 3.0f),
                    random_uniform(d, seed + 2, 0.5f, 1.5f),
                    std::vector<float>(static_cast<size_t>(s.rows)),
                    std::vector<float>(static_cast<size_t>(s.rows)),
                    random_uniform(d, seed + 3),
                    random_uniform(n, seed + 4)};
  std::vector<float> y(n), beta(d, 0.0f);
  Tensor y_view = view(y, {s.rows, s.d}), mean = view(in.mean, {s.rows}),
         rstd = view(in.rstd, {s.rows});
  layernorm_forward(view(in.x, {s.rows, s.d}), view(in.gamma, {s.d}), view(beta, {s.d}), y_view,
                    mean, rstd, kEps);
  return in;
}

struct BackwardResult {
  std::vector<float> dx, d_gamma, d_beta, d_branch, d_branch_bias;
};

BackwardResult empty_backward(const BackwardInputs& in) {
  const auto n = static_cast<size_t>(in.s.rows * in.s.d);
  return {std::vector<float>(n), in.grad_init, in.grad_init, std::vector<float>(n), in.grad_init};
}

// layernorm_backward into dx, then dropout_backward_bias from the stored dx.
BackwardResult two_op_backward(const BackwardInputs& in, float p, const RngKey& key) {
  const int64_t rows = in.s.rows, d = in.s.d;
  BackwardResult out = empty_backward(in);
  Tensor dx = view(out.dx, {rows, d}), d_gamma = view(out.d_gamma, {d}),
         d_beta = view(out.d_beta, {d}), d_branch = view(out.d_branch, {rows, d}),
         d_branch_bias = view(out.d_branch_bias, {d});
  layernorm_backward(view(in.dy, {rows, d}), view(in.x, {rows, d}), view(in.gamma, {d}),
                     view(in.mean, {rows}), view(in.rstd, {rows}), dx, d_gamma, d_beta);
  dropout_backward_bias(dx, d_branch, p, key, d_branch_bias);
  return out;
}

// The fused op, dx into fresh memory or over a copy of dy (as the sublayer runs it: in place).
BackwardResult fused_backward(const BackwardInputs& in, float p, const RngKey& key,
                              bool dx_over_dy) {
  const int64_t rows = in.s.rows, d = in.s.d;
  BackwardResult out = empty_backward(in);
  if (dx_over_dy) out.dx = in.dy;
  Tensor dx = view(out.dx, {rows, d}), d_gamma = view(out.d_gamma, {d}),
         d_beta = view(out.d_beta, {d}), d_branch = view(out.d_branch, {rows, d}),
         d_branch_bias = view(out.d_branch_bias, {d});
  const Tensor dy = dx_over_dy ? dx : view(in.dy, {rows, d});
  layernorm_backward_dropout_bias(dy, view(in.x, {rows, d}), view(in.gamma, {d}),
                                  view(in.mean, {rows}), view(in.rstd, {rows}), dx, d_gamma, d_beta,
                                  d_branch, p, key, d_branch_bias);
  return out;
}

// layernorm_backward_add into dx, then dropout_backward_bias from the stored dx.
BackwardResult two_op_backward_add(const BackwardInputs& in, float p, const RngKey& key) {
  const int64_t rows = in.s.rows, d = in.s.d;
  BackwardResult out = empty_backward(in);
  Tensor dx = view(out.dx, {rows, d}), d_gamma = view(out.d_gamma, {d}),
         d_beta = view(out.d_beta, {d}), d_branch = view(out.d_branch, {rows, d}),
         d_branch_bias = view(out.d_branch_bias, {d});
  layernorm_backward_add(view(in.dy, {rows, d}), view(in.x, {rows, d}), view(in.gamma, {d}),
                         view(in.mean, {rows}), view(in.rstd, {rows}), view(in.residual, {rows, d}),
                         dx, d_gamma, d_beta);
  dropout_backward_bias(dx, d_branch, p, key, d_branch_bias);
  return out;
}

// The pre-norm fused op, dx into fresh memory or over a copy of the residual (as the sublayer
// runs it: in place).
BackwardResult fused_backward_add(const BackwardInputs& in, float p, const RngKey& key,
                                  bool dx_over_residual) {
  const int64_t rows = in.s.rows, d = in.s.d;
  BackwardResult out = empty_backward(in);
  if (dx_over_residual) out.dx = in.residual;
  Tensor dx = view(out.dx, {rows, d}), d_gamma = view(out.d_gamma, {d}),
         d_beta = view(out.d_beta, {d}), d_branch = view(out.d_branch, {rows, d}),
         d_branch_bias = view(out.d_branch_bias, {d});
  const Tensor residual = dx_over_residual ? dx : view(in.residual, {rows, d});
  layernorm_backward_add_dropout_bias(
      view(in.dy, {rows, d}), view(in.x, {rows, d}), view(in.gamma, {d}), view(in.mean, {rows}),
      view(in.rstd, {rows}), residual, dx, d_gamma, d_beta, d_branch, p, key, d_branch_bias);
  return out;
}

}  // namespace

TEST_CASE("dropout_residual_layernorm_forward equals dropout_residual_add then layernorm_forward",
          "[layernorm][dropout]") {
  const RngKey key{41, 12, 6};
  for (Shape s : kShapes)
    for (float p : kDropouts) {
      const ForwardInputs in = forward_inputs(s, static_cast<uint32_t>(400 + s.rows * s.d));
      const ForwardResult expected = two_op_forward(in, p, key);
      for (SumOver over : {SumOver::fresh, SumOver::residual, SumOver::branch}) {
        INFO("rows " << s.rows << " d " << s.d << " p " << p << " sum over "
                     << (over == SumOver::fresh      ? "fresh memory"
                         : over == SumOver::residual ? "the residual"
                                                     : "the branch"));
        const ForwardResult got = fused_forward(in, p, key, over);
        CHECK(bits(got.sum) == bits(expected.sum));
        CHECK(bits(got.y) == bits(expected.y));
        CHECK(bits(got.mean) == bits(expected.mean));
        CHECK(bits(got.rstd) == bits(expected.rstd));
      }
    }
}

TEST_CASE("layernorm_backward_dropout_bias equals layernorm_backward then dropout_backward_bias",
          "[layernorm][dropout][bias_grad_tails]") {
  const RngKey key{43, 13, 7};
  for (Shape s : kShapes)
    for (float p : kDropouts) {
      const BackwardInputs in = backward_inputs(s, static_cast<uint32_t>(500 + s.rows * s.d));
      const BackwardResult expected = two_op_backward(in, p, key);
      for (bool dx_over_dy : {false, true}) {
        INFO("rows " << s.rows << " d " << s.d << " p " << p << " dx over dy " << dx_over_dy);
        const BackwardResult got = fused_backward(in, p, key, dx_over_dy);
        CHECK(bits(got.dx) == bits(expected.dx));
        CHECK(bits(got.d_gamma) == bits(expected.d_gamma));
        CHECK(bits(got.d_beta) == bits(expected.d_beta));
        CHECK(bits(got.d_branch) == bits(expected.d_branch));
        CHECK(bits(got.d_branch_bias) == bits(expected.d_branch_bias));
      }
    }
}

TEST_CASE(
    "layernorm_backward_add_dropout_bias equals layernorm_backward_add then dropout_backward_bias",
    "[layernorm][dropout][bias_grad_tails]") {
  const RngKey key{47, 14, 8};
  for (Shape s : kShapes)
    for (float p : kDropouts) {
      const BackwardInputs in = backward_inputs(s, static_cast<uint32_t>(800 + s.rows * s.d));
      const BackwardResult expected = two_op_backward_add(in, p, key);
      for (bool dx_over_residual : {false, true}) {
        INFO("rows " << s.rows << " d " << s.d << " p " << p << " dx over residual "
                     << dx_over_residual);
        const BackwardResult got = fused_backward_add(in, p, key, dx_over_residual);
        CHECK(bits(got.dx) == bits(expected.dx));
        CHECK(bits(got.d_gamma) == bits(expected.d_gamma));
        CHECK(bits(got.d_beta) == bits(expected.d_beta));
        CHECK(bits(got.d_branch) == bits(expected.d_branch));
        CHECK(bits(got.d_branch_bias) == bits(expected.d_branch_bias));
      }
      // p 0: d_branch is a copy of dx.
      if (p == 0.0f) CHECK(bits(expected.d_branch) == bits(expected.dx));
    }
}

TEST_CASE("dropout_residual_layernorm_forward rejects bad arguments before writing anything",
          "[layernorm][dropout][errors]") {
  const int64_t rows = 3, d = 4;
  const ForwardInputs in = forward_inputs({rows, d}, 600);
  std::vector<float> sum(12, 7.0f), y(12, 7.0f), mean(3, 7.0f), rstd(3, 7.0f), wide(16), row(3),
      four(4), shifted(13);
  const Tensor residual = view(in.residual, {rows, d}), branch = view(in.branch, {rows, d}),
               gamma = view(in.gamma, {d}), beta = view(in.beta, {d});
  Tensor sum_view = view(sum, {rows, d}), y_view = view(y, {rows, d}),
         mean_view = view(mean, {rows}), rstd_view = view(rstd, {rows});
  // The call with one argument replaced; returns the std::invalid_argument message ("" if none).
  struct Args {
    Tensor residual, branch, sum, gamma, beta, y, mean, rstd;
    float p;
  };
  const Args good{residual, branch, sum_view, gamma, beta, y_view, mean_view, rstd_view, 0.1f};
  const auto message_of = [&](Args a) {
    return invalid_argument_message([&] {
      dropout_residual_layernorm_forward(a.residual, a.branch, a.sum, a.p, {}, a.gamma, a.beta, a.y,
                                         a.mean, a.rstd, kEps);
    });
  };
  const auto fails_with = [&](Args a, const char* what) {
    const std::string message = message_of(a);
    INFO("message: " << message);
    CHECK(message_has(message, "dropout_residual_layernorm_forward: "));
    CHECK(message_has(message, what));
  };
  Args a = good;
  a.residual = view(wide, {16});
  fails_with(a, "residual has shape [16] f32 cpu, expected rank 2 [rows, d]");
  a = good, a.branch = view(wide, {4, 4});
  fails_with(a, "branch has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.sum = view(wide, {4, 4});
  fails_with(a, "sum has shape");
  a = good, a.gamma = view(row, {3});
  fails_with(a, "gamma has shape");
  a = good, a.beta = view(row, {3});
  fails_with(a, "beta has shape");
  a = good, a.y = view(wide, {4, 4});
  fails_with(a, "y has shape");
  a = good, a.mean = view(four, {4});
  fails_with(a, "mean has shape");
  a = good, a.rstd = view(four, {4});
  fails_with(a, "rstd has shape");
  a = good, a.p = 1.0f;
  fails_with(a, "dropout probability");
  a = good, a.y = a.sum;
  fails_with(a, "y [3, 4] f32 cpu must not overlap sum");
  a = good, a.y = a.residual;
  fails_with(a, "must not overlap residual");
  // sum one element off the branch: overlapping, but not the same memory.
  a = good, a.branch = Tensor(shifted.data(), DType::f32, Device::cpu, {rows, d});
  a.sum = Tensor(shifted.data() + 1, DType::f32, Device::cpu, {rows, d});
  fails_with(a,
             "sum [3, 4] f32 cpu must not overlap branch [3, 4] f32 cpu in memory (it may be "
             "the very same memory)");
  // A bf16 tensor on the CPU (the CPU is fp32-only), a tensor on another device.
  a = good, a.beta = Tensor(beta.data, DType::bf16, Device::cpu, {d});
  fails_with(a, "beta must be f32");
  a = good, a.gamma = Tensor(gamma.data, DType::f32, Device::cuda, {d});
  fails_with(a, "tensors on different devices");
  // Nothing was written by any of the failed calls.
  CHECK(sum == std::vector<float>(12, 7.0f));
  CHECK(y == std::vector<float>(12, 7.0f));
  CHECK(mean == std::vector<float>(3, 7.0f));
  CHECK(rstd == std::vector<float>(3, 7.0f));
  CHECK(message_of(good).empty());
}

TEST_CASE("layernorm_backward_dropout_bias rejects bad arguments before writing anything",
          "[layernorm][dropout][errors]") {
  const int64_t rows = 3, d = 4;
  const BackwardInputs in = backward_inputs({rows, d}, 700);
  std::vector<float> dx(12, 7.0f), d_gamma(4, 7.0f), d_beta(4, 7.0f), d_branch(12, 7.0f),
      d_branch_bias(4, 7.0f), wide(16), row(3), four(4);
  struct Args {
    Tensor dy, x, gamma, mean, rstd, dx, d_gamma, d_beta, d_branch, d_branch_bias;
    float p;
  };
  const Args good{view(in.dy, {rows, d}),
                  view(in.x, {rows, d}),
                  view(in.gamma, {d}),
                  view(in.mean, {rows}),
                  view(in.rstd, {rows}),
                  view(dx, {rows, d}),
                  view(d_gamma, {d}),
                  view(d_beta, {d}),
                  view(d_branch, {rows, d}),
                  view(d_branch_bias, {d}),
                  0.1f};
  const auto message_of = [&](Args a) {
    return invalid_argument_message([&] {
      layernorm_backward_dropout_bias(a.dy, a.x, a.gamma, a.mean, a.rstd, a.dx, a.d_gamma, a.d_beta,
                                      a.d_branch, a.p, {}, a.d_branch_bias);
    });
  };
  const auto fails_with = [&](Args a, const char* what) {
    const std::string message = message_of(a);
    INFO("message: " << message);
    CHECK(message_has(message, "layernorm_backward_dropout_bias: "));
    CHECK(message_has(message, what));
  };
  Args a = good;
  a.x = view(wide, {16});
  fails_with(a, "x has shape [16] f32 cpu, expected rank 2 [rows, d]");
  a = good, a.dy = view(wide, {4, 4});
  fails_with(a, "dy has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.gamma = view(row, {3});
  fails_with(a, "gamma has shape");
  a = good, a.mean = view(four, {4});
  fails_with(a, "mean has shape");
  a = good, a.dx = view(wide, {4, 4});
  fails_with(a, "dx has shape");
  a = good, a.d_beta = view(row, {3});
  fails_with(a, "d_beta has shape");
  a = good, a.d_branch = view(wide, {4, 4});
  fails_with(a, "d_branch has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.d_branch_bias = view(row, {3});
  fails_with(a, "d_branch_bias has shape [3] f32 cpu, expected [4]");
  a = good, a.p = -0.5f;
  fails_with(a, "dropout probability");
  // dx may be dy itself, but not part of it, and not x; d_branch apart from dy, x and dx;
  // d_branch_bias apart from the matrices.
  std::vector<float> dy_shifted(13);
  a = good, a.dy = Tensor(dy_shifted.data(), DType::f32, Device::cpu, {rows, d});
  a.dx = Tensor(dy_shifted.data() + 1, DType::f32, Device::cpu, {rows, d});
  fails_with(a, "dx [3, 4] f32 cpu must not overlap dy");
  a = good, a.dx = a.x;
  fails_with(a, "dx [3, 4] f32 cpu must not overlap x");
  a = good, a.d_branch = a.dx;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap dx");
  a = good, a.d_branch = a.dy;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap dy");
  a = good, a.d_branch_bias = Tensor(d_branch.data(), DType::f32, Device::cpu, {d});
  fails_with(a, "d_branch_bias [4] f32 cpu must not overlap d_branch");
  a = good, a.d_branch = Tensor(d_branch.data(), DType::f16, Device::cpu, {rows, d});
  fails_with(a, "d_branch must be f32");
  a = good, a.d_branch_bias = Tensor(d_branch_bias.data(), DType::f32, Device::cuda, {d});
  fails_with(a, "tensors on different devices");
  CHECK(dx == std::vector<float>(12, 7.0f));
  CHECK(d_gamma == std::vector<float>(4, 7.0f));
  CHECK(d_beta == std::vector<float>(4, 7.0f));
  CHECK(d_branch == std::vector<float>(12, 7.0f));
  CHECK(d_branch_bias == std::vector<float>(4, 7.0f));
  CHECK(message_of(good).empty());
}

TEST_CASE("layernorm_backward_add_dropout_bias rejects bad arguments before writing anything",
          "[layernorm][dropout][errors]") {
  const int64_t rows = 3, d = 4;
  const BackwardInputs in = backward_inputs({rows, d}, 900);
  std::vector<float> dx(12, 7.0f), d_gamma(4, 7.0f), d_beta(4, 7.0f), d_branch(12, 7.0f),
      d_branch_bias(4, 7.0f), residual = in.residual, wide(16), row(3), four(4);
  struct Args {
    Tensor dy, x, gamma, mean, rstd, residual, dx, d_gamma, d_beta, d_branch, d_branch_bias;
    float p;
  };
  const Args good{view(in.dy, {rows, d}),    view(in.x, {rows, d}),    view(in.gamma, {d}),
                  view(in.mean, {rows}),     view(in.rstd, {rows}),    view(residual, {rows, d}),
                  view(dx, {rows, d}),       view(d_gamma, {d}),       view(d_beta, {d}),
                  view(d_branch, {rows, d}), view(d_branch_bias, {d}), 0.1f};
  const auto message_of = [&](Args a) {
    return invalid_argument_message([&] {
      layernorm_backward_add_dropout_bias(a.dy, a.x, a.gamma, a.mean, a.rstd, a.residual, a.dx,
                                          a.d_gamma, a.d_beta, a.d_branch, a.p, {},
                                          a.d_branch_bias);
    });
  };
  const auto fails_with = [&](Args a, const char* what) {
    const std::string message = message_of(a);
    INFO("message: " << message);
    CHECK(message_has(message, "layernorm_backward_add_dropout_bias: "));
    CHECK(message_has(message, what));
  };
  Args a = good;
  a.x = view(wide, {16});
  fails_with(a, "x has shape [16] f32 cpu, expected rank 2 [rows, d]");
  a = good, a.dy = view(wide, {4, 4});
  fails_with(a, "dy has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.gamma = view(row, {3});
  fails_with(a, "gamma has shape");
  a = good, a.mean = view(four, {4});
  fails_with(a, "mean has shape");
  a = good, a.rstd = view(four, {4});
  fails_with(a, "rstd has shape");
  a = good, a.residual = view(wide, {4, 4});
  fails_with(a, "residual has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.dx = view(wide, {4, 4});
  fails_with(a, "dx has shape");
  a = good, a.d_gamma = view(row, {3});
  fails_with(a, "d_gamma has shape");
  a = good, a.d_beta = view(row, {3});
  fails_with(a, "d_beta has shape");
  a = good, a.d_branch = view(wide, {4, 4});
  fails_with(a, "d_branch has shape [4, 4] f32 cpu, expected [3, 4]");
  a = good, a.d_branch_bias = view(row, {3});
  fails_with(a, "d_branch_bias has shape [3] f32 cpu, expected [4]");
  a = good, a.p = 1.0f;
  fails_with(a, "dropout probability");
  // dx may be the residual itself, but not part of it; not dy (not even all of it), not x;
  // d_branch apart from dy, x, dx and the residual; d_branch_bias apart from dy, dx and d_branch.
  std::vector<float> shifted(13);
  a = good, a.residual = Tensor(shifted.data(), DType::f32, Device::cpu, {rows, d});
  a.dx = Tensor(shifted.data() + 1, DType::f32, Device::cpu, {rows, d});
  fails_with(a,
             "dx [3, 4] f32 cpu must not overlap residual [3, 4] f32 cpu in memory (it may be "
             "the very same memory)");
  a = good, a.dx = a.dy;
  fails_with(a, "dx [3, 4] f32 cpu must not overlap dy");
  a = good, a.dx = a.x;
  fails_with(a, "dx [3, 4] f32 cpu must not overlap x");
  a = good, a.d_branch = a.dy;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap dy");
  a = good, a.d_branch = a.x;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap x");
  a = good, a.d_branch = a.dx;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap dx");
  a = good, a.d_branch = a.residual;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap residual");
  // In place (dx the residual), d_branch over both.
  a = good, a.dx = a.residual, a.d_branch = a.residual;
  fails_with(a, "d_branch [3, 4] f32 cpu must not overlap");
  a = good, a.d_branch_bias = Tensor(a.dy.data, DType::f32, Device::cpu, {d});
  fails_with(a, "d_branch_bias [4] f32 cpu must not overlap dy");
  a = good, a.d_branch_bias = Tensor(dx.data() + 4, DType::f32, Device::cpu, {d});
  fails_with(a, "d_branch_bias [4] f32 cpu must not overlap dx");
  a = good, a.d_branch_bias = Tensor(d_branch.data(), DType::f32, Device::cpu, {d});
  fails_with(a, "d_branch_bias [4] f32 cpu must not overlap d_branch");
  // A 16-bit tensor on the CPU (the CPU is fp32-only), a tensor on another device.
  a = good, a.residual = Tensor(residual.data(), DType::bf16, Device::cpu, {rows, d});
  fails_with(a, "residual must be f32");
  a = good, a.d_branch = Tensor(d_branch.data(), DType::f16, Device::cpu, {rows, d});
  fails_with(a, "d_branch must be f32");
  a = good, a.residual = Tensor(residual.data(), DType::f32, Device::cuda, {rows, d});
  fails_with(a, "tensors on different devices");
  a = good, a.d_branch_bias = Tensor(d_branch_bias.data(), DType::f32, Device::cuda, {d});
  fails_with(a, "tensors on different devices");
  CHECK(dx == std::vector<float>(12, 7.0f));
  CHECK(d_gamma == std::vector<float>(4, 7.0f));
  CHECK(d_beta == std::vector<float>(4, 7.0f));
  CHECK(d_branch == std::vector<float>(12, 7.0f));
  CHECK(d_branch_bias == std::vector<float>(4, 7.0f));
  CHECK(residual == in.residual);
  CHECK(message_of(good).empty());
  // dx over the residual, as the model calls it, is allowed.
  a = good, a.dx = a.residual;
  CHECK(message_of(a).empty());
}
