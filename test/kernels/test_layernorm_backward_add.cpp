// layernorm_backward_add on the CPU: equal bit for bit to layernorm_backward then residual_add
// (dx apart and dx over residual, odd shapes), its input gradient against finite differences, and
// the argument errors (shapes, dx over dy, dx partly over residual) naming the op.
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr float kEps = 1e-5f;

// A layer norm's inputs and saved statistics, and the gradients flowing into its backward.
struct BackwardInputs {
  int64_t rows, d;
  std::vector<float> x, gamma, mean, rstd;  // [rows, d], [d], [rows], [rows]
  std::vector<float> dy, residual;          // [rows, d] each
  std::vector<float> grad_init;             // [d]: d_gamma and d_beta start here (+=)
};

BackwardInputs make_inputs(int64_t rows, int64_t d, uint32_t seed) {
  const auto n = static_cast<size_t>(rows * d);
  BackwardInputs in;
  in.rows = rows;
  in.d = d;
  in.x = random_uniform(n, seed, -2.0f, 3.0f);
  in.gamma = random_uniform(static_cast<size_t>(d), seed + 1, 0.5f, 1.5f);
  in.dy = random_uniform(n, seed + 2);
  in.residual = random_uniform(n, seed + 3);
  in.grad_init = random_uniform(static_cast<size_t>(d), seed + 4);
  in.mean.resize(static_cast<size_t>(rows));
  in.rstd.resize(static_cast<size_t>(rows));
  std::vector<float> y(n), beta(static_cast<size_t>(d), 0.0f);
  Tensor y_view = view(y, {rows, d}), mean = view(in.mean, {rows}), rstd = view(in.rstd, {rows});
  layernorm_forward(view(in.x, {rows, d}), view(in.gamma, {d}), view(beta, {d}), y_view, mean, rstd,
                    kEps);
  return in;
}

struct BackwardResult {
  std::vector<float> dx, d_gamma, d_beta;
};

// layernorm_backward into a scratch tensor, then residual_add: the two ops the fused one replaces.
BackwardResult two_op_backward(const BackwardInputs& in) {
  const int64_t rows = in.rows, d = in.d;
  BackwardResult out{std::vector<float>(in.x.size()), in.grad_init, in.grad_init};
  std::vector<float> scratch(in.x.size());
  Tensor scratch_view = view(scratch, {rows, d}), dx = view(out.dx, {rows, d});
  Tensor d_gamma = view(out.d_gamma, {d}), d_beta = view(out.d_beta, {d});
  layernorm_backward(view(in.dy, {rows, d}), view(in.x, {rows, d}), view(in.gamma, {d}),
                     view(in.mean, {rows}), view(in.rstd, {rows}), scratch_view, d_gamma, d_beta);
  residual_add(view(in.residual, {rows, d}), scratch_view, dx);
  return out;
}

// layernorm_backward_add into a fresh dx, or over a copy of the residual.
BackwardResult fused_backward(const BackwardInputs& in, bool dx_over_residual) {
  const int64_t rows = in.rows, d = in.d;
  BackwardResult out{dx_over_residual ? in.residual : std::vector<float>(in.x.size()), in.grad_init,
                     in.grad_init};
  Tensor dx = view(out.dx, {rows, d});
  Tensor d_gamma = view(out.d_gamma, {d}), d_beta = view(out.d_beta, {d});
  const Tensor residual = dx_over_residual ? dx : view(in.residual, {rows, d});
  layernorm_backward_add(view(in.dy, {rows, d}), view(in.x, {rows, d}), view(in.gamma, {d}),
                         view(in.mean, {rows}), view(in.rstd, {rows}), residual, dx, d_gamma,
                         d_beta);
  return out;
}

}  // namespace

TEST_CASE("layernorm_backward_add equals layernorm_backward then residual_add bit for bit",
          "[layernorm]") {
  // 129 x 520 passes the threshold where the CPU rows run on several threads.
  const auto shape = GENERATE(std::vector<int64_t>{1, 5}, std::vector<int64_t>{1, 64},
                              std::vector<int64_t>{1, 520}, std::vector<int64_t>{3, 5},
                              std::vector<int64_t>{3, 64}, std::vector<int64_t>{3, 520},
                              std::vector<int64_t>{37, 5}, std::vector<int64_t>{37, 64},
                              std::vector<int64_t>{37, 520}, std::vector<int64_t>{129, 520});
  const int64_t rows = shape[0], d = shape[1];
  INFO("rows " << rows << " d " << d);
  const BackwardInputs in = make_inputs(rows, d, static_cast<uint32_t>(100 + rows * d));
  const BackwardResult expected = two_op_backward(in);
  for (bool dx_over_residual : {false, true}) {
    INFO("dx over residual " << dx_over_residual);
    const BackwardResult got = fused_backward(in, dx_over_residual);
    CHECK(bits(got.dx) == bits(expected.dx));
    CHECK(bits(got.d_gamma) == bits(expected.d_gamma));
    CHECK(bits(got.d_beta) == bits(expected.d_beta));
  }
}

TEST_CASE("layernorm_backward_add matches finite differences of LN(x) + x",
          "[layernorm][gradcheck]") {
  // loss(x) = <w_ln, LN(x)> + <w_res, x>: its gradient is layernorm_backward_add with dy = w_ln
  // and residual = w_res (the pre-norm residual's backward). d_gamma and d_beta are
  // layernorm_backward's bit for bit (above), checked against finite differences there.
  const auto shape =
      GENERATE(std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 5}, std::vector<int64_t>{3, 7},
               std::vector<int64_t>{37, 5}, std::vector<int64_t>{13, 64});
  const int64_t rows = shape[0], d = shape[1];
  const BackwardInputs in = make_inputs(rows, d, static_cast<uint32_t>(200 + rows * d));
  const std::vector<float> beta = random_uniform(static_cast<size_t>(d), 7);
  const BackwardResult fused = fused_backward(in, false);
  const auto loss = [&](const std::vector<float>& x) {
    std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(mean.size());
    Tensor y_view = view(y, {rows, d}), mean_view = view(mean, {rows}),
           rstd_view = view(rstd, {rows});
    layernorm_forward(view(x, {rows, d}), view(in.gamma, {d}), view(beta, {d}), y_view, mean_view,
                      rstd_view, kEps);
    return weighted_sum(y, in.dy) + weighted_sum(x, in.residual);
  };
  // The step of the layernorm gradient checks (test_layernorm.cpp says why).
  const GradCheckResult result = check_gradient(loss, in.x, fused.dx, {1e-2, 1e-2, 0});
  INFO("rows " << rows << " d " << d << ": dx " << result.describe());
  CHECK(result.max_rel_error < 1e-2);
}

TEST_CASE("layernorm_backward_add rejects bad shapes and overlapping dx, naming the op",
          "[layernorm][errors]") {
  const int64_t rows = 3, d = 4;
  const BackwardInputs in = make_inputs(rows, d, 300);
  std::vector<float> dx(12), d_gamma(4), d_beta(4), short_residual(8);
  Tensor dx_view = view(dx, {rows, d}), dg = view(d_gamma, {d}), db = view(d_beta, {d});
  const auto message_of = [&](const Tensor& dy, const Tensor& residual, Tensor& out) {
    return invalid_argument_message([&] {
      layernorm_backward_add(dy, view(in.x, {rows, d}), view(in.gamma, {d}), view(in.mean, {rows}),
                             view(in.rstd, {rows}), residual, out, dg, db);
    });
  };
  const Tensor dy = view(in.dy, {rows, d}), residual = view(in.residual, {rows, d});
  const auto has = [](const std::string& message, const char* what) {
    return message.find(what) != std::string::npos;
  };

  const std::string bad_residual = message_of(dy, view(short_residual, {2, d}), dx_view);
  CHECK(has(bad_residual, "layernorm_backward_add"));
  CHECK(has(bad_residual, "residual"));

  Tensor short_dx = view(short_residual, {2, d});
  CHECK(has(message_of(dy, residual, short_dx), "layernorm_backward_add: dx"));

  // dx over dy: the same memory, or one element apart.
  std::vector<float> dy_copy = in.dy;
  Tensor dy_over = view(dy_copy, {rows, d});
  const std::string over_dy = message_of(dy_over, residual, dy_over);
  CHECK(has(over_dy, "layernorm_backward_add: dx"));
  CHECK(has(over_dy, "must not overlap dy"));
  std::vector<float> shared(static_cast<size_t>(rows * d + 1));  // two [rows, d] views, 1 apart
  Tensor first(shared.data(), DType::f32, Device::cpu, {rows, d});
  Tensor second(shared.data() + 1, DType::f32, Device::cpu, {rows, d});
  CHECK(has(message_of(first, residual, second), "must not overlap dy"));

  // dx may be the residual itself, but not part of it.
  CHECK(has(message_of(dy, first, second), "must not overlap residual"));
  CHECK(message_of(dy, first, first).empty());
}
