// Multi-head attention: values against a double reference (dropout included), masks (padding,
// causal, fully masked rows), gradients of q, k and v, thread-count independence, shape errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "kernels/attention.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

struct Case {
  AttentionShape shape;
  std::vector<int32_t> lengths;  // [batch]
  float dropout_p = 0.0f;
};

const RngKey kKey{17, 23, 5};

int64_t q_size(const AttentionShape& s) {
  return s.batch * s.q_len * s.heads * s.head_dim;
}
int64_t kv_size(const AttentionShape& s) {
  return s.batch * s.kv_len * s.heads * s.head_dim;
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs random_inputs(const AttentionShape& s, uint32_t seed) {
  return {random_uniform(static_cast<size_t>(q_size(s)), seed),
          random_uniform(static_cast<size_t>(kv_size(s)), seed + 1),
          random_uniform(static_cast<size_t>(kv_size(s)), seed + 2)};
}

struct Forward {
  std::vector<float> out, probs;
};

Forward attend(const Case& c, const Inputs& in) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim;
  Forward f{std::vector<float>(in.q.size()),
            std::vector<float>(static_cast<size_t>(s.batch * s.heads * s.q_len * s.kv_len))};
  Tensor out = view(f.out, {s.batch * s.q_len, width});
  Tensor probs = view(f.probs, {s.batch, s.heads, s.q_len, s.kv_len});
  attention_forward(view(in.q, {s.batch * s.q_len, width}), view(in.k, {s.batch * s.kv_len, width}),
                    view(in.v, {s.batch * s.kv_len, width}), view(c.lengths, {s.batch}), out, probs,
                    s, c.dropout_p, kKey);
  return f;
}

Inputs attend_backward(const Case& c, const Inputs& in, const Forward& f,
                       const std::vector<float>& d_out) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim;
  // Filled with NaN: every element must be written.
  Inputs g{std::vector<float>(in.q.size(), NAN), std::vector<float>(in.k.size(), NAN),
           std::vector<float>(in.v.size(), NAN)};
  Tensor dq = view(g.q, {s.batch * s.q_len, width});
  Tensor dk = view(g.k, {s.batch * s.kv_len, width}), dv = view(g.v, {s.batch * s.kv_len, width});
  attention_backward(
      view(d_out, {s.batch * s.q_len, width}), view(in.q, {s.batch * s.q_len, width}),
      view(in.k, {s.batch * s.kv_len, width}), view(in.v, {s.batch * s.kv_len, width}),
      view(f.probs, {s.batch, s.heads, s.q_len, s.kv_len}), view(c.lengths, {s.batch}), dq, dk, dv,
      s, c.dropout_p, kKey);
  return g;
}

// Attention in double, straight from the definition, with the mask from dropout_keep().
std::vector<double> reference(const Case& c, const Inputs& in) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim;
  std::vector<double> out(in.q.size(), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t t = 0; t < s.q_len; ++t) {
        std::vector<double> score(static_cast<size_t>(s.kv_len), 0.0);
        std::vector<bool> seen(static_cast<size_t>(s.kv_len), false);
        double max_score = -INFINITY;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          seen[j] = j < c.lengths[b] && (!s.causal || j <= t);
          if (!seen[j]) continue;
          for (int64_t d = 0; d < s.head_dim; ++d)
            score[j] += static_cast<double>(in.q[(b * s.q_len + t) * width + h * s.head_dim + d]) *
                        in.k[(b * s.kv_len + j) * width + h * s.head_dim + d];
          score[j] /= std::sqrt(static_cast<double>(s.head_dim));
          max_score = std::max(max_score, score[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.kv_len; ++j)
          sum += seen[j] ? std::exp(score[j] - max_score) : 0.0;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          if (!seen[j]) continue;
          const uint64_t element =
              static_cast<uint64_t>(((b * s.heads + h) * s.q_len + t) * s.kv_len + j);
          const double keep = c.dropout_p == 0.0f || dropout_keep(kKey, element, c.dropout_p)
                                  ? 1.0 / (1.0 - c.dropout_p)
                                  : 0.0;
          const double weight = std::exp(score[j] - max_score) / sum * keep;
          for (int64_t d = 0; d < s.head_dim; ++d)
            out[(b * s.q_len + t) * width + h * s.head_dim + d] +=
                weight * in.v[(b * s.kv_len + j) * width + h * s.head_dim + d];
        }
      }
  return out;
}

std::vector<Case> gradient_cases() {
  std::vector<Case> cases;
  for (float p : {0.0f, 0.3f}) {
    cases.push_back({{2, 5, 5, 2, 3, false}, {5, 3}, p});       // padded self-attention
    cases.push_back({{2, 7, 7, 1, 4, true}, {7, 4}, p});        // causal
    cases.push_back({{2, 3, 6, 3, 2, false}, {6, 2}, p});       // cross-attention, T < S
    cases.push_back({{3, 1, 13, 1, 7, false}, {13, 1, 0}, p});  // one key; no key at all
    cases.push_back({{1, 13, 33, 2, 5, true}, {33}, p});        // causal with T != S
  }
  return cases;
}

}  // namespace

TEST_CASE("attention_forward equals a double reference, with and without dropout", "[attention]") {
  for (const Case& c : gradient_cases()) {
    const Inputs in = random_inputs(c.shape, 100);
    const Forward f = attend(c, in);
    const std::vector<double> expected = reference(c, in);
    for (size_t i = 0; i < expected.size(); ++i)
      REQUIRE(f.out[i] == Approx(expected[i]).margin(2e-6));
    // Probabilities: a distribution over the visible keys, 0 elsewhere.
    const AttentionShape& s = c.shape;
    for (int64_t row = 0; row < s.batch * s.heads * s.q_len; ++row) {
      const int64_t b = row / (s.heads * s.q_len), t = row % s.q_len;
      const int64_t visible = s.causal ? std::min<int64_t>(c.lengths[b], t + 1) : c.lengths[b];
      double sum = 0;
      for (int64_t j = 0; j < s.kv_len; ++j) {
        const float p = f.probs[static_cast<size_t>(row * s.kv_len + j)];
        if (j >= visible) REQUIRE(p == 0.0f);
        sum += p;
      }
      REQUIRE(sum == Approx(visible > 0 ? 1.0 : 0.0).margin(1e-6));
    }
  }
}

TEST_CASE("attention backward matches finite differences", "[attention][gradcheck]") {
  for (const Case& c : gradient_cases()) {
    const Inputs in = random_inputs(c.shape, 200);
    const std::vector<float> weights = random_uniform(in.q.size(), 300);
    const Inputs g = attend_backward(c, in, attend(c, in), weights);

    // eps 5e-2: the fp32 rounding of the outputs (~3e-8 each, divided by 2 eps) must stay small
    // next to gradients that are themselves small (one query spreads dk thinly over 13 keys),
    // while the truncation error (eps^2 / 6 times third derivatives of O(1) scores) stays ~1e-3.
    // The worst case measured is 3e-3.
    const GradCheckOptions options{5e-2, 1e-2, 0};
    const auto dq = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(attend(c, {x, in.k, in.v}).out, weights);
        },
        in.q, g.q, options);
    const auto dk = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(attend(c, {in.q, x, in.v}).out, weights);
        },
        in.k, g.k, options);
    const auto dv = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(attend(c, {in.q, in.k, x}).out, weights);
        },
        in.v, g.v, options);
    INFO("batch " << c.shape.batch << " T " << c.shape.q_len << " S " << c.shape.kv_len << " heads "
                  << c.shape.heads << " dh " << c.shape.head_dim << " causal " << c.shape.causal
                  << " p " << c.dropout_p);
    INFO("dq " << dq.describe());
    INFO("dk " << dk.describe());
    INFO("dv " << dv.describe());
    CHECK(dq.max_rel_error < 1e-2);
    CHECK(dk.max_rel_error < 1e-2);
    CHECK(dv.max_rel_error < 1e-2);
  }
}

TEST_CASE("a query with every key masked gives zeros, not NaN", "[attention]") {
  const Case c{{2, 3, 4, 2, 3, false}, {0, 2}, 0.1f};
  const Inputs in = random_inputs(c.shape, 400);
  const Forward f = attend(c, in);
  const int64_t width = c.shape.heads * c.shape.head_dim;
  for (int64_t i = 0; i < c.shape.q_len * width; ++i)
    REQUIRE(f.out[static_cast<size_t>(i)] == 0.0f);
  for (int64_t i = 0; i < c.shape.heads * c.shape.q_len * c.shape.kv_len; ++i)
    REQUIRE(f.probs[static_cast<size_t>(i)] == 0.0f);
  const Inputs g = attend_backward(c, in, f, random_uniform(in.q.size(), 401));
  for (int64_t i = 0; i < c.shape.q_len * width; ++i) REQUIRE(g.q[static_cast<size_t>(i)] == 0.0f);
  for (int64_t i = 0; i < c.shape.kv_len * width; ++i) {
    REQUIRE(g.k[static_cast<size_t>(i)] == 0.0f);
    REQUIRE(g.v[static_cast<size_t>(i)] == 0.0f);
  }
  for (float x : g.q) REQUIRE(std::isfinite(x));
}

TEST_CASE("padded keys and values are never read, even when they hold NaN", "[attention]") {
  const Case c{{2, 4, 6, 2, 3, true}, {6, 3}, 0.2f};
  const Inputs in = random_inputs(c.shape, 450);
  Inputs poisoned = in;
  const int64_t width = c.shape.heads * c.shape.head_dim;
  for (int64_t s = 3; s < 6; ++s)  // sentence 1 has 3 keys: its rows 3..5 are padding
    for (int64_t d = 0; d < width; ++d) {
      poisoned.k[static_cast<size_t>((6 + s) * width + d)] = NAN;
      poisoned.v[static_cast<size_t>((6 + s) * width + d)] = NAN;
    }
  const Forward clean = attend(c, in), f = attend(c, poisoned);
  CHECK(f.out == clean.out);
  CHECK(f.probs == clean.probs);
  const std::vector<float> d_out = random_uniform(in.q.size(), 451);
  const Inputs g_clean = attend_backward(c, in, clean, d_out);
  const Inputs g = attend_backward(c, poisoned, f, d_out);
  CHECK(g.q == g_clean.q);
  CHECK(g.k == g_clean.k);
  CHECK(g.v == g_clean.v);
}

TEST_CASE("causal: the output at t does not depend on keys or values after t", "[attention]") {
  const Case c{{1, 9, 9, 2, 4, true}, {9}, 0.2f};
  const Inputs in = random_inputs(c.shape, 500);
  const Forward base = attend(c, in);
  const int64_t width = c.shape.heads * c.shape.head_dim;
  for (int64_t j : {0, 4, 8}) {
    Inputs moved = in;
    for (int64_t d = 0; d < width; ++d) {
      moved.k[static_cast<size_t>(j * width + d)] += 0.5f;
      moved.v[static_cast<size_t>(j * width + d)] -= 0.5f;
    }
    const Forward f = attend(c, moved);
    for (int64_t t = 0; t < c.shape.q_len; ++t) {
      const auto row = [&](const Forward& x) {
        return std::vector<float>(x.out.begin() + t * width, x.out.begin() + (t + 1) * width);
      };
      INFO("moved key " << j << ", query " << t);
      if (t < j)
        CHECK(row(f) == row(base));
      else
        CHECK(row(f) != row(base));
    }
  }
}

#if defined(_OPENMP)
TEST_CASE("attention results do not depend on the thread count", "[attention][determinism]") {
  const Case c{{3, 21, 23, 4, 8, false}, {23, 9, 5}, 0.1f};  // big enough for threads
  const Inputs in = random_inputs(c.shape, 600);
  const std::vector<float> d_out = random_uniform(in.q.size(), 601);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Forward f1 = attend(c, in);
  const Inputs g1 = attend_backward(c, in, f1, d_out);
  omp_set_num_threads(3);
  const Forward f3 = attend(c, in);
  const Inputs g3 = attend_backward(c, in, f3, d_out);
  omp_set_num_threads(threads);
  CHECK(f1.out == f3.out);
  CHECK(f1.probs == f3.probs);
  CHECK(g1.q == g3.q);
  CHECK(g1.k == g3.k);
  CHECK(g1.v == g3.v);
}
#endif

TEST_CASE("attention rejects bad shapes and lengths, naming the op", "[attention][errors]") {
  const Case good{{2, 3, 4, 2, 3, false}, {4, 2}, 0.0f};
  const Inputs in = random_inputs(good.shape, 700);
  CHECK_NOTHROW(attend(good, in));
  const Case long_length{good.shape, {5, 2}, 0.0f};
  std::string message = invalid_argument_message([&] { attend(long_length, in); });
  CHECK(message.find("attention_forward") != std::string::npos);
  CHECK(message.find("kv_lengths") != std::string::npos);
  Case three_heads = good;
  three_heads.shape.heads = 3;
  three_heads.shape.head_dim = 2;  // the same width split differently: accepted
  CHECK_NOTHROW(attend(three_heads, in));
  AttentionShape wider = good.shape;
  wider.head_dim = 4;  // width 8, but q, k, v are [.., 6]
  std::vector<float> out(in.q.size()), probs(2 * 2 * 3 * 4);
  Tensor out_view = view(out, {6, 6}), probs_view = view(probs, {2, 2, 3, 4});
  message = invalid_argument_message([&] {
    attention_forward(view(in.q, {6, 6}), view(in.k, {8, 6}), view(in.v, {8, 6}),
                      view(good.lengths, {2}), out_view, probs_view, wider, 0.0f, kKey);
  });
  CHECK(message.find("attention_forward: q") != std::string::npos);
  const Case bad_p{good.shape, good.lengths, 1.0f};
  CHECK(invalid_argument_message([&] { attend(bad_p, in); }).find("attention_forward") !=
        std::string::npos);
  const Forward f = attend(good, in);
  const AttentionShape& s = good.shape;
  std::vector<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  Tensor dq_view = view(dq, {6, 6}), dk_view = view(dk, {8, 6}), dv_view = view(dv, {8, 6});
  const std::vector<float> short_d_out(5 * 6);
  message = invalid_argument_message([&] {
    attention_backward(view(short_d_out, {5, 6}), view(in.q, {6, 6}), view(in.k, {8, 6}),
                       view(in.v, {8, 6}), view(f.probs, {2, 2, 3, 4}), view(good.lengths, {2}),
                       dq_view, dk_view, dv_view, s, 0.0f, kKey);
  });
  CHECK(message.find("attention_backward: d_out") != std::string::npos);
}
