// Gradient norm, clipping factor, Adam (hand-computed steps, weight decay) and LazyAdam.
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

namespace {

// A GradClip record in host memory, as the optimizer's buffer holds it.
struct ClipRecord {
  std::vector<int32_t> words = std::vector<int32_t>(kGradClipWords, 0);
  Tensor view() { return Tensor(words.data(), DType::i32, Device::cpu, {kGradClipWords}); }
};

}  // namespace

TEST_CASE(
    "grad_clip_into records the norm and the factor that Optimizer::step computed on the host",
    "[cpu][optimizer]") {
  const std::vector<float> grads = {3.0f, -4.0f, 12.0f};  // norm 13 before the divisor
  for (double divisor : {1.0, 2.0, 6.5})
    for (float max_norm : {0.0f, 1.0f, 6.5f, 100.0f}) {
      INFO("divisor " << divisor << " max_norm " << max_norm);
      ClipRecord record;
      Tensor clip = record.view();
      grad_clip_into(view(grads, {3}), divisor, max_norm, clip);
      const GradClip got = read_grad_clip(clip);
      const double norm = std::sqrt(sum_of_squares(view(grads, {3}))) / divisor;
      CHECK(got.grad_norm == norm);
      CHECK(got.scale == static_cast<float>(clip_factor(norm, max_norm) / divisor));
      CHECK(got.skip == 0);
    }
  ClipRecord record;
  Tensor clip = record.view();
  grad_clip_into(view(grads, {3}), 2.0, 1.0f, clip);
  CHECK(read_grad_clip(clip).scale == static_cast<float>(1.0 / 6.5 / 2.0));  // 13 / 2 clipped to 1
  for (float bad : {INFINITY, NAN}) {
    const std::vector<float> overflowed = {1.0f, bad};
    grad_clip_into(view(overflowed, {2}), 1.0, 1.0f, clip);
    CHECK(read_grad_clip(clip).skip == 1);
  }
}

TEST_CASE("adam_update with a clip record applies its factor, or nothing when it says skip",
          "[cpu][optimizer]") {
  const int64_t n = 5;
  const std::vector<float> grad = {0.5f, -1.0f, 2.0f, 0.0f, 0.25f};
  const std::vector<float> param0 = {1.0f, -0.5f, 0.25f, 2.0f, -1.0f}, m0(n, 0.01f), v0(n, 0.02f);
  AdamHyper h;
  h.lr = 0.01f;
  for (bool lazy : {false, true}) {
    INFO((lazy ? "lazy_adam_update" : "adam_update"));
    auto update = [&](std::vector<float>& p, std::vector<float>& m, std::vector<float>& v,
                      GradScale scale) {
      Tensor tp = view(p, {1, n}), tm = view(m, {1, n}), tv = view(v, {1, n});
      if (lazy)
        lazy_adam_update(tp, view(grad, {1, n}), tm, tv, h, scale);
      else
        adam_update(tp, view(grad, {1, n}), tm, tv, h, scale);
    };
    ClipRecord record;
    Tensor clip = record.view();
    grad_clip_into(view(grad, {1, n}), 4.0, 0.1f, clip);
    std::vector<float> p = param0, m = m0, v = v0, p_ref = param0, m_ref = m0, v_ref = v0;
    update(p, m, v, GradScale(clip));
    update(p_ref, m_ref, v_ref, read_grad_clip(clip).scale);
    CHECK(p == p_ref);
    CHECK(m == m_ref);
    CHECK(v == v_ref);
    CHECK(p != param0);

    const std::vector<float> overflowed = {1.0f, INFINITY};
    grad_clip_into(view(overflowed, {2}), 4.0, 0.1f, clip);
    p = param0, m = m0, v = v0;
    update(p, m, v, GradScale(clip));
    CHECK(p == param0);
    CHECK(m == m0);
    CHECK(v == v0);
  }
}

TEST_CASE("grad_clip_into rejects a bad record or divisor, naming the op",
          "[cpu][optimizer][errors]") {
  const std::vector<float> grads = {1.0f, 2.0f};
  std::vector<int32_t> short_words(3);
  Tensor short_clip(short_words.data(), DType::i32, Device::cpu, {3});
  CHECK(invalid_argument_message([&] {
          grad_clip_into(view(grads, {2}), 1.0, 1.0f, short_clip);
        }).find("grad_clip_into: clip") != std::string::npos);
  ClipRecord record;
  Tensor clip = record.view();
  CHECK(invalid_argument_message([&] {
          grad_clip_into(view(grads, {2}), 0.0, 1.0f, clip);
        }).find("grad_clip_into: divisor") != std::string::npos);
  std::vector<float> param(2), m(2), v(2);
  Tensor tp = view(param, {2}), tm = view(m, {2}), tv = view(v, {2});
  CHECK(invalid_argument_message([&] {
          adam_update(tp, view(grads, {2}), tm, tv, AdamHyper{}, GradScale(short_clip));
        }).find("adam_update: clip") != std::string::npos);
}
