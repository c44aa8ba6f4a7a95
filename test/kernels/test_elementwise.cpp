// ReLU, residual add and the buffer helpers: values, aliasing, gradients, shape and dtype errors.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/half_bits.h"
#include "kernels/half_host.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

std::vector<float> relu(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  Tensor y_view = view(y, {static_cast<int64_t>(y.size())});
  relu_forward(view(x, {static_cast<int64_t>(x.size())}), y_view);
  return y;
}

std::vector<float> add(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> y(a.size());
  Tensor y_view = view(y, {static_cast<int64_t>(y.size())});
  residual_add(view(a, {static_cast<int64_t>(a.size())}), view(b, {static_cast<int64_t>(b.size())}),
               y_view);
  return y;
}

}  // namespace

TEST_CASE("relu forward and backward, in place too", "[elementwise]") {
  const std::vector<float> x = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f, -1e-30f, 1e-30f};
  const std::vector<float> expected = {0.0f, 0.0f, 0.0f, 0.5f, 3.0f, 0.0f, 1e-30f};
  CHECK(relu(x) == expected);
  std::vector<float> in_place = x;
  Tensor in_place_view = view(in_place, {7});
  relu_forward(in_place_view, in_place_view);
  CHECK(in_place == expected);

  std::vector<float> dy = {1, 2, 3, 4, 5, 6, 7};
  Tensor dy_view = view(dy, {7});
  relu_backward(dy_view, view(expected, {7}), dy_view);  // dx over dy
  CHECK(dy == std::vector<float>{0, 0, 0, 4, 5, 0, 7});
}

TEST_CASE("relu backward matches finite differences away from the kink",
          "[elementwise][gradcheck]") {
  for (int64_t n : {1, 3, 7, 13, 33}) {
    std::vector<float> x = random_uniform(static_cast<size_t>(n), 30 + n);
    for (float& v : x)
      if (std::fabs(v) < 0.05f) v = 0.05f;  // the central difference must not straddle 0
    const std::vector<float> weights = random_uniform(static_cast<size_t>(n), 50 + n);
    const std::vector<float> y = relu(x);
    std::vector<float> dx(static_cast<size_t>(n));
    Tensor dx_view = view(dx, {n});
    relu_backward(view(weights, {n}), view(y, {n}), dx_view);
    const auto result = check_gradient(
        [&](const std::vector<float>& v) { return weighted_sum(relu(v), weights); }, x, dx);
    INFO("n " << n << ": " << result.describe());
    CHECK(result.max_rel_error < 1e-3);
  }
}

TEST_CASE("residual add: values, aliasing, and a gradient of dy for both inputs",
          "[elementwise][gradcheck]") {
  const std::vector<float> a = random_uniform(13, 1), b = random_uniform(13, 2);
  const std::vector<float> y = add(a, b);
  for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == a[i] + b[i]);
  std::vector<float> into_a = a;
  Tensor a_view = view(into_a, {13});
  residual_add(a_view, view(b, {13}), a_view);
  CHECK(into_a == y);

  // The backward hands dy to both inputs unchanged: the gradient of w·(a + b) is w for each.
  const std::vector<float> weights = random_uniform(13, 3);
  const GradCheckOptions linear_step{0.25, 1e-2, 0};  // linear: no truncation error
  const auto da =
      check_gradient([&](const std::vector<float>& v) { return weighted_sum(add(v, b), weights); },
                     a, weights, linear_step);
  const auto db =
      check_gradient([&](const std::vector<float>& v) { return weighted_sum(add(a, v), weights); },
                     b, weights, linear_step);
  INFO("da " << da.describe() << "; db " << db.describe());
  CHECK(da.max_rel_error < 1e-3);
  CHECK(db.max_rel_error < 1e-3);
}

TEST_CASE("add_inplace, scale_inplace, fill_zero and copy_tensor", "[elementwise]") {
  std::vector<float> y = {1, 2, 3}, x = {0.5f, -1, 4};
  Tensor y_view = view(y, {3});
  add_inplace(y_view, view(x, {3}));
  CHECK(y == std::vector<float>{1.5f, 1, 7});
  scale_inplace(y_view, 2.0f);
  CHECK(y == std::vector<float>{3, 2, 14});
  fill_zero(y_view);
  CHECK(y == std::vector<float>{0, 0, 0});

  // fill_zero and copy_tensor move bytes, so they take any dtype.
  std::vector<int32_t> ids = {4, 5, 6}, copy(3);
  Tensor ids_view = view(ids, {3}), copy_view = view(copy, {3});
  copy_tensor(ids_view, copy_view);
  CHECK(copy == ids);
  fill_zero(ids_view);
  CHECK(ids == std::vector<int32_t>{0, 0, 0});
  std::vector<float> dst(6);
  Tensor dst_view = view(dst, {2, 3});
  const std::vector<float> src = random_uniform(6, 4);
  copy_tensor(view(src, {2, 3}), dst_view);
  CHECK(dst == src);
}

TEST_CASE("elementwise ops reject mismatched shapes and non-f32 data, naming the op",
          "[elementwise][errors]") {
  const std::vector<float> a(6), b(5);
  const std::vector<int32_t> ints(6);
  std::vector<float> y(6);
  Tensor y_view = view(y, {6}), y_2d = view(y, {2, 3});
  CHECK(invalid_argument_message([&] {
          relu_forward(view(b, {5}), y_view);
        }).find("relu_forward") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          relu_forward(view(ints, {6}), y_view);
        }).find("relu_forward: x must be f32") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          relu_backward(view(a, {6}), view(a, {6}), y_2d);
        }).find("relu_backward") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          residual_add(view(a, {6}), view(b, {5}), y_view);
        }).find("residual_add") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          add_inplace(y_view, view(a, {2, 3}));
        }).find("add_inplace") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          copy_tensor(view(ints, {6}), y_view);
        }).find("copy_tensor") != std::string::npos);
  Tensor ints_view = view(ints, {6});
  CHECK(invalid_argument_message([&] { scale_inplace(ints_view, 2.0f); }).find("scale_inplace") !=
        std::string::npos);
}

TEST_CASE("host bf16/fp16 conversions round to nearest even and round-trip every value",
          "[cpu][elementwise][convert]") {
  CHECK(nmt::float_to_bf16(1.0f) == 0x3F80);
  CHECK(nmt::float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);      // tie: down to even
  CHECK(nmt::float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);  // tie: up to even
  CHECK(nmt::float_to_f16(1.0f) == 0x3C00);
  CHECK(nmt::float_to_f16(0.1f) == 0x2E66);
  CHECK(nmt::float_to_f16(65504.0f) == 0x7BFF);
  CHECK(nmt::float_to_f16(65519.0f) == 0x7BFF);
  CHECK(nmt::float_to_f16(65520.0f) == 0x7C00);      // rounds to infinity
  CHECK(nmt::float_to_f16(-0x1p-24f) == 0x8001);     // smallest subnormal
  CHECK(nmt::float_to_f16(0x1p-26f) == 0x0000);      // below half of it
  CHECK(nmt::float_to_f16(3 * 0x1p-25f) == 0x0002);  // tie between 1 and 2 steps: to even
  CHECK(std::isnan(nmt::f16_to_float(nmt::float_to_f16(std::nanf("")))));
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    auto h = static_cast<uint16_t>(bits);
    float f16 = nmt::f16_to_float(h), bf16 = nmt::bf16_to_float(h);
    if (!std::isnan(f16)) REQUIRE(nmt::float_to_f16(f16) == h);
    if (!std::isnan(bf16)) REQUIRE(nmt::float_to_bf16(bf16) == h);
  }
}

TEST_CASE("convert_tensor on the CPU: f32 <-> bf16/f16 through the host conversions",
          "[cpu][elementwise][convert]") {
  std::vector<float> src = {0.0f, -1.5f, 3.14159f, 1e-6f, 70000.0f, -0x1p-20f};
  std::vector<uint16_t> half(src.size());
  std::vector<float> back(src.size());
  const int64_t n = static_cast<int64_t>(src.size());
  nmt::Tensor s(src.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  nmt::Tensor b(back.data(), nmt::DType::f32, nmt::Device::cpu, {n});
  for (nmt::DType dtype : {nmt::DType::bf16, nmt::DType::f16}) {
    nmt::Tensor h(half.data(), dtype, nmt::Device::cpu, {n});
    nmt::convert_tensor(s, h);
    nmt::convert_tensor(h, b);
    for (size_t i = 0; i < src.size(); ++i) {
      uint16_t expected =
          dtype == nmt::DType::bf16 ? nmt::float_to_bf16(src[i]) : nmt::float_to_f16(src[i]);
      CHECK(half[i] == expected);
      float expected_back =
          dtype == nmt::DType::bf16 ? nmt::bf16_to_float(expected) : nmt::f16_to_float(expected);
      CHECK(back[i] == expected_back);
    }
  }
  std::vector<int32_t> ids(src.size());
  nmt::Tensor i32(ids.data(), nmt::DType::i32, nmt::Device::cpu, {n});
  CHECK_THROWS_AS(nmt::convert_tensor(s, i32), std::invalid_argument);
}

TEST_CASE("half_bits_positive is `> 0` of the 16-bit float, for every bit pattern", "[cpu]") {
  int positives_bf16 = 0, positives_f16 = 0;
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const bool bf16 = nmt::half_bits_positive(bits, nmt::kBf16InfinityBits);
    const bool f16 = nmt::half_bits_positive(bits, nmt::kF16InfinityBits);
    REQUIRE(bf16 == (nmt::bf16_to_float(h) > 0.0f));
    REQUIRE(f16 == (nmt::f16_to_float(h) > 0.0f));
    // The high half of a packed pair is ignored.
    REQUIRE(nmt::half_bits_positive(bits | 0xABCD0000u, nmt::kBf16InfinityBits) == bf16);
    positives_bf16 += bf16;
    positives_f16 += f16;
  }
  CHECK(positives_bf16 == 0x7F80);  // 1 .. +inf
  CHECK(positives_f16 == 0x7C00);
}
