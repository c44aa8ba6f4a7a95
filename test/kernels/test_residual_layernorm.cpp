// The post-norm sublayer's fused LayerNorm tail (kernels/layernorm.h) on the CPU:
// dropout_residual_layernorm_forward equals dropout_residual_add then layernorm_forward bit for bit
// (every output, at odd shapes and on the multi-threaded path, p 0, 0.1 and 0.3, sum over its
// allowed inputs); bad arguments give one std::invalid_argument naming the op and the tensor,
// thrown before anything is written.
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

struct Shape {
  int64_t rows, d;
};

// 1 x 8 and 7 x 64: a row, a few; 3 x 96 and 33 x 520: widths that are no power of two; 129 x 520
// passes the threshold where the CPU loops run on several threads.
const Shape kShapes[] = {{1, 8}, {7, 64}, {3, 96}, {33, 520}, {129, 520}};
const float kDropouts[] = {0.0f, 0.1f, 0.3f};

// The bits of each value, so that a comparison tells -0 from +0.
std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  out.reserve(values.size());
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

bool message_has(const std::string& message, const char* what) {
  return message.find(what) != std::string::npos;
}

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
