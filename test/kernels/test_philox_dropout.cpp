// Philox known answers, the uniform stream, and dropout (masks, keep rate, gradient).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/dropout_mask.h"
#include "kernels/elementwise.h"
#include "kernels/philox.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

std::vector<float> dropout_of(const std::vector<float>& x, float p, const RngKey& key) {
  std::vector<float> y(x.size());
  Tensor y_view = view(y, {static_cast<int64_t>(y.size())});
  dropout_forward(view(x, {static_cast<int64_t>(x.size())}), y_view, p, key);
  return y;
}

}  // namespace

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[philox]") {
  const Philox4 zeros = philox4x32(0, 0, 0, 0, 0, 0);
  CHECK(zeros.v[0] == 0x6627e8d5u);
  CHECK(zeros.v[1] == 0xe169c58du);
  CHECK(zeros.v[2] == 0xbc57ac4cu);
  CHECK(zeros.v[3] == 0x9b00dbd8u);
  const Philox4 pi =
      philox4x32(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(pi.v[0] == 0xd16cfe09u);
  CHECK(pi.v[1] == 0x94fdccebu);
  CHECK(pi.v[2] == 0x5001e420u);
  CHECK(pi.v[3] == 0x24126ea1u);
}

TEST_CASE("rng_uniform gives pinned values and stays in [0, 1)", "[philox]") {
  // Computed once by this implementation: a change here changes every dropout mask.
  const RngKey key{42, 7, 3};
  CHECK(rng_uniform(key, 0) * 16777216.0f == 15834058.0f);
  CHECK(rng_uniform(key, 1) * 16777216.0f == 887177.0f);
  CHECK(rng_uniform(key, 3) * 16777216.0f == 721473.0f);
  CHECK(rng_uniform(key, 4) * 16777216.0f == 9615644.0f);
  CHECK(rng_uniform(key, 1000003) * 16777216.0f == 10646040.0f);
  // Steps and elements beyond 32 bits reach the high counter/key words.
  const RngKey wide{0x123456789abcdefull, 0x100000002ull, 11};
  CHECK(rng_uniform(wide, 0) * 16777216.0f == 3099998.0f);
  CHECK(rng_uniform(wide, 5) * 16777216.0f == 7747165.0f);
  CHECK(rng_uniform(wide, (uint64_t{1} << 34) + 3) * 16777216.0f == 4159663.0f);

  double sum = 0;
  float lowest = 1.0f, highest = 0.0f;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const float u = rng_uniform(key, static_cast<uint64_t>(i));
    lowest = std::min(lowest, u);
    highest = std::max(highest, u);
    sum += u;
  }
  CHECK(lowest >= 0.0f);
  CHECK(highest < 1.0f);
  CHECK(sum / n == Approx(0.5).margin(0.005));  // sd of the mean is 0.29 / sqrt(n) = 0.0009
}

TEST_CASE("dropout_uniform takes 16-bit halves, eight elements a Philox call", "[philox]") {
  const RngKey key{42, 7, 3};
  for (uint64_t block : {uint64_t{0}, uint64_t{1}, uint64_t{125000}, (uint64_t{1} << 33) + 5}) {
    const Philox4 draw = philox_block(key, block);
    for (int j = 0; j < 8; ++j) {
      const uint32_t word = draw.v[j / 2];
      const uint32_t half = j % 2 == 0 ? word & 0xFFFFu : word >> 16;
      REQUIRE(dropout_uniform(key, 8 * block + static_cast<uint64_t>(j)) * 65536.0f ==
              static_cast<float>(half));
    }
  }
  // A keep test resolves p to 1/65536: u >= p for u = k / 65536 exactly where k >= p * 65536.
  int64_t kept = 0;
  const int n = 200000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float u = dropout_uniform(key, static_cast<uint64_t>(i));
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    sum += u;
    kept += dropout_keep(key, static_cast<uint64_t>(i), 0.1f) ? 1 : 0;
  }
  CHECK(sum / n == Approx(0.5).margin(0.004));
  CHECK(static_cast<double>(kept) / n == Approx(0.9).margin(0.004));  // sd 0.0007
}

TEST_CASE("dropout_scales draws the same mask as dropout_keep from any start", "[dropout]") {
  const RngKey key{9, 1234, 5};
  const float p = 0.37f;
  for (uint64_t first : {0u, 1u, 2u, 3u, 4u, 7u, 8u, 9u, 1001u}) {
    for (int64_t count : {1, 3, 7, 13, 33, 70}) {
      std::vector<float> scales(static_cast<size_t>(count));
      cpu::dropout_scales(key, first, count, p, scales.data());
      for (int64_t i = 0; i < count; ++i) {
        const bool keep = dropout_keep(key, first + static_cast<uint64_t>(i), p);
        REQUIRE(scales[static_cast<size_t>(i)] == (keep ? 1.0f / (1.0f - p) : 0.0f));
      }
    }
  }
}

TEST_CASE("dropout masks are keyed by seed, step and tensor id", "[dropout]") {
  const std::vector<float> x(4096, 1.0f);
  const RngKey key{1, 10, 2};
  CHECK(dropout_of(x, 0.5f, key) == dropout_of(x, 0.5f, key));
  CHECK(dropout_of(x, 0.5f, key) != dropout_of(x, 0.5f, RngKey{1, 11, 2}));
  CHECK(dropout_of(x, 0.5f, key) != dropout_of(x, 0.5f, RngKey{1, 10, 3}));
  CHECK(dropout_of(x, 0.5f, key) != dropout_of(x, 0.5f, RngKey{2, 10, 2}));
}

TEST_CASE("with_step_read keeps a key's draws and drops its device step pointer", "[philox]") {
  // On the host the step is the key's own (rng_step reads device memory only in GPU code), so the
  // copy a kernel takes once a block draws what the key does.
  const uint64_t elsewhere = 99;
  const RngKey key{7, 12, 3, &elsewhere};
  const RngKey read = with_step_read(key);
  CHECK(read.seed == key.seed);
  CHECK(read.step == 12);
  CHECK(read.tensor_id == key.tensor_id);
  CHECK(read.step_on_device == nullptr);
  for (uint64_t block : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 40}) {
    const Philox4 a = philox_block(key, block), b = philox_block(read, block);
    CHECK(std::equal(a.v, a.v + 4, b.v));
  }
}

TEST_CASE("dropout keeps 1 - p of the elements, scaled by 1 / (1 - p)", "[dropout]") {
  const std::vector<float> x = random_uniform(100000, 3, 0.5f, 1.5f);  // never 0
  for (float p : {0.1f, 0.3f, 0.5f}) {
    const std::vector<float> y = dropout_of(x, p, RngKey{7, 3, 1});
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] == 0.0f) continue;
      ++kept;
      REQUIRE(y[i] == x[i] * (1.0f / (1.0f - p)));
    }
    // sd of the rate is sqrt(p (1 - p) / n) <= 0.0016: 0.01 is over 6 sd.
    CHECK(static_cast<double>(kept) / x.size() == Approx(1.0 - p).margin(0.01));
  }
}

TEST_CASE("dropout with p = 0 is the identity, in place too", "[dropout]") {
  const std::vector<float> x = random_uniform(33, 4);
  CHECK(dropout_of(x, 0.0f, RngKey{1, 2, 3}) == x);
  std::vector<float> y = x;
  Tensor y_view = view(y, {33});
  dropout_forward(y_view, y_view, 0.0f, RngKey{1, 2, 3});
  CHECK(y == x);
}

TEST_CASE("dropout in place equals dropout out of place", "[dropout]") {
  const std::vector<float> x = random_uniform(1000, 5);
  std::vector<float> y = x;
  Tensor y_view = view(y, {10, 100});
  dropout_forward(y_view, y_view, 0.2f, RngKey{5, 6, 7});
  CHECK(y == dropout_of(x, 0.2f, RngKey{5, 6, 7}));
}

TEST_CASE("dropout backward matches finite differences (a fixed mask makes it linear)",
          "[dropout][gradcheck]") {
  const RngKey key{11, 12, 13};
  const float p = 0.25f;
  for (int64_t n : {1, 3, 7, 13, 33}) {
    const std::vector<float> x = random_uniform(static_cast<size_t>(n), 20 + n);
    const std::vector<float> weights = random_uniform(static_cast<size_t>(n), 40 + n);
    std::vector<float> dx(static_cast<size_t>(n));
    Tensor dx_view = view(dx, {n});
    dropout_backward(view(weights, {n}), dx_view, p, key);
    const auto loss = [&](const std::vector<float>& input) {
      return weighted_sum(dropout_of(input, p, key), weights);
    };
    // Linear with a fixed mask: no truncation error, so a large step shrinks the rounding error.
    const GradCheckResult result = check_gradient(loss, x, dx, GradCheckOptions{0.25, 1e-2, 0});
    INFO("n = " << n << ": " << result.describe());
    CHECK(result.max_rel_error < 1e-3);
  }
}

TEST_CASE("dropout rejects p outside [0, 1) and mismatched shapes", "[dropout][errors]") {
  std::vector<float> x(6), y(6), z(5);
  Tensor y_view = view(y, {6}), z_view = view(z, {5});
  CHECK(invalid_argument_message([&] {
          dropout_forward(view(x, {6}), y_view, 1.0f, {});
        }).find("dropout_forward") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          dropout_forward(view(x, {6}), y_view, -0.1f, {});
        }).find("dropout_forward") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          dropout_forward(view(x, {6}), z_view, 0.1f, {});
        }).find("dropout_forward") != std::string::npos);
  CHECK(invalid_argument_message([&] {
          dropout_backward(view(x, {2, 3}), y_view, 0.1f, {});
        }).find("dropout_backward") != std::string::npos);
}
