// Gradient norm, clipping factor, Adam (hand-computed steps, weight decay) and LazyAdam.
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/half_host.h"
#include "kernels/optimizer.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

TEST_CASE("sum_of_squares sums in double over any length", "[optimizer]") {
  for (size_t n : {size_t{1}, size_t{33}, size_t{100003}}) {  // 100003 spans several chunks
    const std::vector<float> x = random_uniform(n, 1);
    double expected = 0;
    for (float v : x) expected += static_cast<double>(v) * v;
    CHECK(sum_of_squares(view(x, {static_cast<int64_t>(n)})) == Approx(expected).epsilon(1e-12));
  }
  const std::vector<float> three_four = {3.0f, 4.0f};
  CHECK(sum_of_squares(view(three_four, {2})) == 25.0);
}

TEST_CASE("clip_factor scales a norm above max_norm down to it", "[optimizer]") {
  CHECK(clip_factor(2.0, 1.0f) == 0.5f);
  CHECK(clip_factor(0.5, 1.0f) == 1.0f);
  CHECK(clip_factor(1.0, 1.0f) == 1.0f);
  CHECK(clip_factor(10.0, 0.0f) == 1.0f);  // clipping off
  CHECK(clip_factor(10.0, -1.0f) == 1.0f);
  CHECK(clip_factor(NAN, 1.0f) == 1.0f);  // a non-finite step is skipped by the caller
}

TEST_CASE("adam_update follows TensorFlow's Adam over two hand-computed steps", "[optimizer]") {
  // lr 0.1, betas (0.9, 0.999), eps 1e-8, grads 0.5 then -0.25 with grad_scale 2 (g = 1, -0.5):
  // step 1: m = 0.1, v = 0.001, lr_t = 0.1 sqrt(0.001) / 0.1 = 0.0316228,
  //         p = 1 - lr_t * 0.1 / (sqrt(0.001) + 1e-8) = 0.9000000316
  // step 2: m = 0.09 - 0.05 = 0.04, v = 0.000999 + 0.00025 = 0.001249,
  //         lr_t = 0.1 sqrt(1 - 0.999^2) / (1 - 0.9^2) = 0.0235317,
  //         p = 0.9000000316 - lr_t * 0.04 / (sqrt(0.001249) + 1e-8) = 0.8733663352
  std::vector<float> param = {1.0f}, m = {0.0f}, v = {0.0f}, grad = {0.5f};
  Tensor p_view = view(param, {1}), m_view = view(m, {1}), v_view = view(v, {1});
  AdamHyper h;
  h.lr = 0.1f;
  h.step = 1;
  adam_update(p_view, view(grad, {1}), m_view, v_view, h, 2.0f);
  CHECK(m[0] == Approx(0.1).epsilon(1e-6));
  CHECK(v[0] == Approx(0.001).epsilon(1e-4));  // 1 - 0.999f is 0.00099998713 in fp32
  CHECK(param[0] == Approx(0.9000000316).epsilon(1e-6));
  grad[0] = -0.25f;
  h.step = 2;
  adam_update(p_view, view(grad, {1}), m_view, v_view, h, 2.0f);
  CHECK(m[0] == Approx(0.04).epsilon(1e-6));
  CHECK(v[0] == Approx(0.001249).epsilon(1e-4));
  CHECK(param[0] == Approx(0.8733663352).epsilon(1e-6));
}

TEST_CASE("adam_update applies decoupled weight decay to the old parameter", "[optimizer]") {
  // As step 1 above with weight_decay 0.01: p = 1 * (1 - 0.1 * 0.01) - 0.1 = 0.899.
  std::vector<float> param = {1.0f}, m = {0.0f}, v = {0.0f};
  const std::vector<float> grad = {1.0f};
  Tensor p_view = view(param, {1}), m_view = view(m, {1}), v_view = view(v, {1});
  AdamHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.01f;
  adam_update(p_view, view(grad, {1}), m_view, v_view, h, 1.0f);
  CHECK(param[0] == Approx(0.899).epsilon(1e-6));
}

TEST_CASE("lazy_adam_update skips zero-gradient rows and updates the rest like adam_update",
          "[optimizer]") {
  const int64_t rows = 5, cols = 7;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> grad = random_uniform(n, 2);
  for (int64_t c = 0; c < cols; ++c) {
    grad[static_cast<size_t>(1 * cols + c)] = 0.0f;  // rows 1 and 3 untouched by the batch
    grad[static_cast<size_t>(3 * cols + c)] = 0.0f;
  }
  grad[static_cast<size_t>(4 * cols + 2)] = 0.0f;  // one zero inside a touched row
  const std::vector<float> param0 = random_uniform(n, 3);
  const std::vector<float> m0 = random_uniform(n, 4);
  const std::vector<float> v0 = random_uniform(n, 5, 0.0f, 1.0f);
  AdamHyper h;
  h.lr = 0.01f;
  h.step = 7;
  h.weight_decay = 0.1f;

  std::vector<float> lazy_p = param0, lazy_m = m0, lazy_v = v0;
  Tensor lp = view(lazy_p, {rows, cols}), lm = view(lazy_m, {rows, cols}),
         lv = view(lazy_v, {rows, cols});
  lazy_adam_update(lp, view(grad, {rows, cols}), lm, lv, h, 0.5f);
  std::vector<float> dense_p = param0, dense_m = m0, dense_v = v0;
  Tensor dp = view(dense_p, {rows, cols}), dm = view(dense_m, {rows, cols}),
         dv = view(dense_v, {rows, cols});
  adam_update(dp, view(grad, {rows, cols}), dm, dv, h, 0.5f);

  for (int64_t r = 0; r < rows; ++r) {
    const bool untouched = r == 1 || r == 3;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      INFO("row " << r << " col " << c);
      CHECK(lazy_p[i] == (untouched ? param0[i] : dense_p[i]));
      CHECK(lazy_m[i] == (untouched ? m0[i] : dense_m[i]));
      CHECK(lazy_v[i] == (untouched ? v0[i] : dense_v[i]));
    }
  }
}

TEST_CASE("optimizer ops reject bad hyperparameters and shapes, naming the op",
          "[optimizer][errors]") {
  std::vector<float> param(6), m(6), v(6), short_m(5);
  const std::vector<float> grad(6);
  Tensor p_view = view(param, {6}), m_view = view(m, {6}), v_view = view(v, {6});
  Tensor short_view = view(short_m, {5}), p_2d = view(param, {2, 3}), m_2d = view(m, {2, 3});
  Tensor v_2d = view(v, {2, 3});
  AdamHyper h;
  h.step = 0;
  CHECK(invalid_argument_message([&] {
          adam_update(p_view, view(grad, {6}), m_view, v_view, h, 1);
        }).find("adam_update: step") != std::string::npos);
  h.step = 1;
  CHECK(invalid_argument_message([&] {
          adam_update(p_view, view(grad, {6}), short_view, v_view, h, 1);
        }).find("adam_update: m") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          lazy_adam_update(p_view, view(grad, {6}), m_view, v_view, h, 1);
        }).find("lazy_adam_update") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          lazy_adam_update(p_2d, view(grad, {3, 2}), m_2d, v_2d, h, 1);
        }).find("lazy_adam_update: grad") != std::string::npos);
}

TEST_CASE("adam on the CPU writes a bf16 working copy of the updated parameters",
          "[cpu][optimizer]") {
  const int64_t n = 9;
  std::vector<float> param(n), grad(n), m(n, 0.0f), v(n, 0.0f), back(n);
  std::vector<uint16_t> working(n);
  for (int64_t i = 0; i < n; ++i) {
    param[i] = 0.3f * static_cast<float>(i) - 1.0f;
    grad[i] = 0.01f * static_cast<float>(i % 4) - 0.015f;
  }
  nmt::Tensor p(param.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  nmt::Tensor g(grad.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  nmt::Tensor tm(m.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  nmt::Tensor tv(v.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  nmt::Tensor w(working.data(), nmt::DType::bf16, nmt::Device::cpu, {n});
  nmt::AdamHyper h;
  nmt::adam_update(p, g, tm, tv, h, 1.0f, &w);
  for (int64_t i = 0; i < n; ++i) CHECK(working[i] == nmt::float_to_bf16(param[i]));
}

// ---- gated updates (the staged step) ----

TEST_CASE("the gated updates give adam_update's and lazy_adam_update's bits from the gate's words",
          "[optimizer]") {
  const int64_t rows = 6, cols = 9;
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<float> grad = random_uniform(n, 12);
  for (int64_t c = 0; c < cols; ++c) grad[static_cast<size_t>(2 * cols + c)] = 0.0f;  // lazy row
  const std::vector<float> param0 = random_uniform(n, 13), m0 = random_uniform(n, 14);
  const std::vector<float> v0 = random_uniform(n, 15, 0.0f, 1.0f);
  AdamHyper h;
  h.lr = 0.003f;
  h.beta2 = 0.98f;
  h.step = 11;
  h.weight_decay = 0.05f;
  const float scale = 1.0f / 333.0f;
  const std::array<float, kAdamGateWords> step_words = adam_gate_words(h, scale);
  std::vector<float> words(step_words.begin(), step_words.end());
  CHECK(words[kAdamGateSkip] == 0.0f);
  CHECK(words[2] == scale);
  Tensor gate = view(words, {kAdamGateWords});
  AdamHyper betas = h;  // what the gated ops read of h: the betas and eps
  betas.lr = 99.0f;
  betas.step = 1;
  betas.weight_decay = 0.0f;
  for (bool lazy : {false, true}) {
    INFO("lazy " << lazy);
    std::vector<float> ref_p = param0, ref_m = m0, ref_v = v0;
    std::vector<float> gated_p = param0, gated_m = m0, gated_v = v0;
    Tensor rp = view(ref_p, {rows, cols}), rm = view(ref_m, {rows, cols}),
           rv = view(ref_v, {rows, cols});
    Tensor gp = view(gated_p, {rows, cols}), gm = view(gated_m, {rows, cols}),
           gv = view(gated_v, {rows, cols});
    const Tensor g = view(grad, {rows, cols});
    if (lazy) {
      lazy_adam_update(rp, g, rm, rv, h, scale);
      lazy_adam_update_gated(gp, g, gm, gv, betas, gate);
    } else {
      adam_update(rp, g, rm, rv, h, scale);
      adam_update_gated(gp, g, gm, gv, betas, gate);
    }
    CHECK(gated_p == ref_p);
    CHECK(gated_m == ref_m);
    CHECK(gated_v == ref_v);
    CHECK(gated_p != param0);
  }
  // A set skip word leaves everything as it is.
  words[kAdamGateSkip] = 1.0f;
  std::vector<float> p = param0, m = m0, v = v0;
  Tensor pv = view(p, {rows, cols}), mv = view(m, {rows, cols}), vv = view(v, {rows, cols});
  adam_update_gated(pv, view(grad, {rows, cols}), mv, vv, betas, gate);
  lazy_adam_update_gated(pv, view(grad, {rows, cols}), mv, vv, betas, gate);
  CHECK(p == param0);
  CHECK(m == m0);
  CHECK(v == v0);
}

TEST_CASE("check_gradient_stage writes the partial sums of squares and flags a non-finite one",
          "[optimizer]") {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{70001}}) {
    INFO("n " << n);
    std::vector<float> grad = random_uniform(static_cast<size_t>(n), 16);
    const int64_t parts = gradient_check_parts(n, Device::cpu);
    CHECK(parts == (n + 32767) / 32768);
    std::vector<float> partials(static_cast<size_t>(parts), -1.0f);
    std::vector<float> words(kAdamGateWords, 0.0f);
    Tensor sums = view(partials, {parts}), gate = view(words, {kAdamGateWords});
    check_gradient_stage(view(grad, {n}), sums, gate);
    double total = 0;
    for (float s : partials) total += s;
    CHECK(total == Approx(sum_of_squares(view(grad, {n}))).epsilon(1e-6));
    CHECK(words[kAdamGateSkip] == 0.0f);
    grad[static_cast<size_t>(n - 1)] = INFINITY;
    check_gradient_stage(view(grad, {n}), sums, gate);
    CHECK(words[kAdamGateSkip] == 1.0f);
    grad[static_cast<size_t>(n - 1)] = 0.5f;  // the flag stays set for the rest of the step
    check_gradient_stage(view(grad, {n}), sums, gate);
    CHECK(words[kAdamGateSkip] == 1.0f);
  }
}

TEST_CASE("the gated ops reject a gate of the wrong size and partials of the wrong count",
          "[optimizer][errors]") {
  std::vector<float> param(6), m(6), v(6), grad(6), short_gate(3), partials(2);
  Tensor p_view = view(param, {6}), m_view = view(m, {6}), v_view = view(v, {6});
  Tensor gate = view(short_gate, {3}), sums = view(partials, {2});
  CHECK(invalid_argument_message([&] {
          adam_update_gated(p_view, view(grad, {6}), m_view, v_view, AdamHyper{}, gate);
        }).find("adam_update_gated: gate") != std::string::npos);
  std::vector<float> words(kAdamGateWords);
  Tensor good_gate = view(words, {kAdamGateWords});
  CHECK(invalid_argument_message([&] {
          check_gradient_stage(view(grad, {6}), sums, good_gate);
        }).find("check_gradient_stage: partials") != std::string::npos);
}
