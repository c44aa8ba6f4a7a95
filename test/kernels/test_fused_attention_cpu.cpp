// Fused attention on the CPU (kernels/fused_attention.h): equals the unfused reference on strided
// (fused-projection) operands, its lse is the log-sum-exp of the scores, backward passes a
// finite-difference check, columns outside the heads stay untouched, and bad arguments are named.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/fused_attention.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

const RngKey kKey{31, 7, 2};
constexpr float kSentinel = 7.25f;  // fills the columns around the heads; must survive

struct Case {
  AttentionShape shape;
  std::vector<int32_t> lengths;  // [batch]
  float dropout_p = 0.0f;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (float p : {0.0f, 0.25f}) {
    all.push_back({{2, 5, 5, 2, 3, false}, {5, 3}, p});       // padded self-attention
    all.push_back({{2, 7, 7, 1, 4, true}, {7, 4}, p});        // causal
    all.push_back({{2, 3, 6, 3, 2, false}, {6, 2}, p});       // cross-attention, T < S
    all.push_back({{3, 1, 13, 1, 7, false}, {13, 1, 0}, p});  // decoding step; no key at all
    all.push_back({{1, 13, 9, 2, 5, true}, {9}, p});          // causal with T > S
  }
  return all;
}

// Dense [rows, width] values placed at column `col` of a [rows, total] matrix of sentinels.
std::vector<float> embed(const std::vector<float>& dense, int64_t rows, int64_t width,
                         int64_t total, int64_t col) {
  std::vector<float> wide(static_cast<size_t>(rows * total), kSentinel);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(dense.begin() + r * width, dense.begin() + (r + 1) * width,
              wide.begin() + r * total + col);
  return wide;
}

std::vector<float> extract(const std::vector<float>& wide, int64_t rows, int64_t width,
                           int64_t total, int64_t col) {
  std::vector<float> dense(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    std::copy(wide.begin() + r * total + col, wide.begin() + r * total + col + width,
              dense.begin() + r * width);
  return dense;
}

// Every element outside columns [col, col + width) still holds the sentinel.
bool untouched_outside(const std::vector<float>& wide, int64_t rows, int64_t width, int64_t total,
                       int64_t col) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < total; ++c)
      if ((c < col || c >= col + width) && wide[static_cast<size_t>(r * total + c)] != kSentinel)
        return false;
  return true;
}

// The fused op on strided operands: q in a [B*T, width + 3] matrix at column 1; k and v in one
// [B*S, 2 * width + 2] matrix at columns 0 and width + 2 (like a fused KV projection).
struct Fused {
  const Case& c;
  int64_t width, q_rows, kv_rows, q_total, kv_total;
  explicit Fused(const Case& cs)
      : c(cs),
        width(cs.shape.heads * cs.shape.head_dim),
        q_rows(cs.shape.batch * cs.shape.q_len),
        kv_rows(cs.shape.batch * cs.shape.kv_len),
        q_total(width + 3),
        kv_total(2 * width + 2) {}

  struct Forward {
    std::vector<float> out, lse;
  };
  Forward forward(const std::vector<float>& q, const std::vector<float>& k,
                  const std::vector<float>& v) const {
    const std::vector<float> wide_q = embed(q, q_rows, width, q_total, 1);
    std::vector<float> wide_kv = embed(k, kv_rows, width, kv_total, 0);
    for (int64_t r = 0; r < kv_rows; ++r)
      std::copy(v.begin() + r * width, v.begin() + (r + 1) * width,
                wide_kv.begin() + r * kv_total + width + 2);
    const AttentionShape& s = c.shape;
    AttentionOperands in{view(wide_q, {q_rows, q_total}),
                         view(wide_kv, {kv_rows, kv_total}),
                         view(wide_kv, {kv_rows, kv_total}),
                         1,
                         0,
                         width + 2};
    Forward f{std::vector<float>(static_cast<size_t>(q_rows * width), NAN),
              std::vector<float>(static_cast<size_t>(s.batch * s.heads * s.q_len), NAN)};
    Tensor out = view(f.out, {q_rows, width}), lse = view(f.lse, {s.batch, s.heads, s.q_len});
    fused_attention_forward(in, view(c.lengths, {s.batch}), out, lse, s, c.dropout_p, kKey);
    return f;
  }

  struct Grads {
    std::vector<float> dq, dk, dv;
    bool untouched;
  };
  Grads backward(const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& d_out) const {
    const Forward f = forward(q, k, v);
    const std::vector<float> wide_q = embed(q, q_rows, width, q_total, 1);
    std::vector<float> wide_kv = embed(k, kv_rows, width, kv_total, 0);
    for (int64_t r = 0; r < kv_rows; ++r)
      std::copy(v.begin() + r * width, v.begin() + (r + 1) * width,
                wide_kv.begin() + r * kv_total + width + 2);
    std::vector<float> wide_dq(wide_q.size(), kSentinel), wide_dkv(wide_kv.size(), kSentinel);
    const AttentionShape& s = c.shape;
    AttentionOperands in{view(wide_q, {q_rows, q_total}),
                         view(wide_kv, {kv_rows, kv_total}),
                         view(wide_kv, {kv_rows, kv_total}),
                         1,
                         0,
                         width + 2};
    AttentionOperands grads{view(wide_dq, {q_rows, q_total}),
                            view(wide_dkv, {kv_rows, kv_total}),
                            view(wide_dkv, {kv_rows, kv_total}),
                            1,
                            0,
                            width + 2};
    fused_attention_backward(view(d_out, {q_rows, width}), in, view(f.out, {q_rows, width}),
                             view(f.lse, {s.batch, s.heads, s.q_len}), view(c.lengths, {s.batch}),
                             grads, s, c.dropout_p, kKey);
    Grads g{extract(wide_dq, q_rows, width, q_total, 1),
            extract(wide_dkv, kv_rows, width, kv_total, 0),
            extract(wide_dkv, kv_rows, width, kv_total, width + 2), true};
    // dk and dv share a matrix: only the 2 padding columns between and after them are foreign.
    g.untouched = untouched_outside(wide_dq, q_rows, width, q_total, 1);
    for (int64_t r = 0; r < kv_rows; ++r)
      for (int64_t col : {width, width + 1})
        g.untouched = g.untouched && wide_dkv[static_cast<size_t>(r * kv_total + col)] == kSentinel;
    return g;
  }
};

struct Reference {
  std::vector<float> out, probs, dq, dk, dv;
};

Reference reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& d_out) {
  const AttentionShape& s = c.shape;
  const int64_t width = s.heads * s.head_dim, q_rows = s.batch * s.q_len,
                kv_rows = s.batch * s.kv_len;
  Reference r{std::vector<float>(q.size()),
              std::vector<float>(static_cast<size_t>(s.batch * s.heads * s.q_len * s.kv_len)),
              std::vector<float>(q.size()), std::vector<float>(k.size()),
              std::vector<float>(v.size())};
  Tensor out = view(r.out, {q_rows, width}),
         probs = view(r.probs, {s.batch, s.heads, s.q_len, s.kv_len});
  const Tensor qv = view(q, {q_rows, width}), kv = view(k, {kv_rows, width}),
               vv = view(v, {kv_rows, width}), len = view(c.lengths, {s.batch});
  attention_forward(qv, kv, vv, len, out, probs, s, c.dropout_p, kKey);
  Tensor dq = view(r.dq, {q_rows, width}), dk = view(r.dk, {kv_rows, width}),
         dv = view(r.dv, {kv_rows, width});
  attention_backward(view(d_out, {q_rows, width}), qv, kv, vv, probs, len, dq, dk, dv, s,
                     c.dropout_p, kKey);
  return r;
}

// log sum_s exp(scaled score) over the visible keys, in double; -inf when none is visible.
double expected_lse(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                    int64_t b, int64_t h, int64_t t) {
  const AttentionShape& s = c.shape;
  const int64_t dh = s.head_dim, width = s.heads * dh;
  const int64_t visible = s.causal ? std::min<int64_t>(c.lengths[b], t + 1) : c.lengths[b];
  if (visible == 0) return -INFINITY;
  std::vector<double> scores;
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < dh; ++d)
      dot += static_cast<double>(q[(b * s.q_len + t) * width + h * dh + d]) *
             k[(b * s.kv_len + j) * width + h * dh + d];
    scores.push_back(dot / std::sqrt(static_cast<double>(dh)));
  }
  const double m = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (double x : scores) sum += std::exp(x - m);
  return m + std::log(sum);
}

}  // namespace

TEST_CASE("fused attention on the CPU equals the unfused reference", "[fused_attention]") {
  for (const Case& c : cases()) {
    const AttentionShape& s = c.shape;
    INFO("batch " << s.batch << " T " << s.q_len << " S " << s.kv_len << " heads " << s.heads
                  << " dh " << s.head_dim << " causal " << s.causal << " p " << c.dropout_p);
    const Fused fused(c);
    const std::vector<float> q = random_uniform(static_cast<size_t>(fused.q_rows * fused.width),
                                                10),
                             k = random_uniform(static_cast<size_t>(fused.kv_rows * fused.width),
                                                11),
                             v = random_uniform(static_cast<size_t>(fused.kv_rows * fused.width),
                                                12),
                             d_out = random_uniform(static_cast<size_t>(fused.q_rows * fused.width),
                                                    13);
    const Reference ref = reference(c, q, k, v, d_out);
    const Fused::Forward f = fused.forward(q, k, v);
    CHECK(f.out == ref.out);  // the same reference code on the same values
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t t = 0; t < s.q_len; ++t) {
          const double want = expected_lse(c, q, k, b, h, t);
          const float got = f.lse[static_cast<size_t>((b * s.heads + h) * s.q_len + t)];
          if (std::isinf(want))
            CHECK((std::isinf(got) && got < 0));
          else
            CHECK(got == Approx(want).margin(1e-5));
        }
    const Fused::Grads g = fused.backward(q, k, v, d_out);
    CHECK(g.untouched);
    // Backward recomputes P from lse: equal to the saved probabilities up to fp32 rounding.
    for (size_t i = 0; i < ref.dq.size(); ++i) REQUIRE(g.dq[i] == Approx(ref.dq[i]).margin(1e-5));
    for (size_t i = 0; i < ref.dk.size(); ++i) REQUIRE(g.dk[i] == Approx(ref.dk[i]).margin(1e-5));
    for (size_t i = 0; i < ref.dv.size(); ++i) REQUIRE(g.dv[i] == Approx(ref.dv[i]).margin(1e-5));
  }
}

TEST_CASE("fused attention backward on the CPU matches finite differences",
          "[fused_attention][gradcheck]") {
  for (const Case& c : cases()) {
    const Fused fused(c);
    const size_t q_size = static_cast<size_t>(fused.q_rows * fused.width),
                 kv_size = static_cast<size_t>(fused.kv_rows * fused.width);
    const std::vector<float> q = random_uniform(q_size, 20), k = random_uniform(kv_size, 21),
                             v = random_uniform(kv_size, 22), weights = random_uniform(q_size, 23);
    const Fused::Grads g = fused.backward(q, k, v, weights);
    // The options of the unfused attention's gradient check (test_attention.cpp says why).
    const GradCheckOptions options{5e-2, 1e-2, 0};
    const auto dq = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(fused.forward(x, k, v).out, weights);
        },
        q, g.dq, options);
    const auto dk = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(fused.forward(q, x, v).out, weights);
        },
        k, g.dk, options);
    const auto dv = check_gradient(
        [&](const std::vector<float>& x) {
          return weighted_sum(fused.forward(q, k, x).out, weights);
        },
        v, g.dv, options);
    const AttentionShape& s = c.shape;
    INFO("batch " << s.batch << " T " << s.q_len << " S " << s.kv_len << " heads " << s.heads
                  << " dh " << s.head_dim << " causal " << s.causal << " p " << c.dropout_p);
    INFO("dq " << dq.describe());
    INFO("dk " << dk.describe());
    INFO("dv " << dv.describe());
    CHECK(dq.max_rel_error < 1e-2);
    CHECK(dk.max_rel_error < 1e-2);
    CHECK(dv.max_rel_error < 1e-2);
  }
}

TEST_CASE("fused attention names bad arguments", "[fused_attention][errors]") {
  const AttentionShape s{2, 3, 4, 2, 3, false};
  std::vector<float> q(6 * 8), kv(8 * 12), out(6 * 6), lse(2 * 2 * 3);
  const std::vector<int32_t> lengths{4, 2};
  Tensor out_view = view(out, {6, 6}), lse_view = view(lse, {2, 2, 3});
  auto run = [&](AttentionOperands in, std::vector<int32_t> lens) {
    return invalid_argument_message(
        [&] { fused_attention_forward(in, view(lens, {2}), out_view, lse_view, s, 0.0f, kKey); });
  };
  const AttentionOperands good{view(q, {6, 8}), view(kv, {8, 12}), view(kv, {8, 12}), 2, 0, 6};
  CHECK(run(good, lengths).empty());
  AttentionOperands past_width = good;
  past_width.v_col = 7;  // columns [7, 13) of a 12-wide matrix
  std::string message = run(past_width, lengths);
  CHECK(message.find("fused_attention_forward: v columns [7, 13)") != std::string::npos);
  message = run(good, {5, 2});
  CHECK(message.find("kv_lengths[0] = 5") != std::string::npos);
  std::vector<float> grads_q(6 * 8), grads_kv(8 * 12), d_out(6 * 6);
  AttentionOperands grads{
      view(grads_q, {6, 8}), view(grads_kv, {8, 12}), view(grads_kv, {8, 12}), 1, 0, 6};
  message = invalid_argument_message([&] {
    fused_attention_backward(view(d_out, {6, 6}), good, out_view, lse_view, view(lengths, {2}),
                             grads, s, 0.0f, kKey);
  });
  CHECK(message.find("fused_attention_backward: dq, dk, dv must use the columns") !=
        std::string::npos);
  CHECK(fused_attention_supported(Device::cpu, DType::f32, 5));
  CHECK_FALSE(fused_attention_supported(Device::cpu, DType::bf16, 64));
}

TEST_CASE("fused attention backward checks its bias gradients; the CPU leaves them to the caller",
          "[fused_attention][errors]") {
  const AttentionShape s{2, 3, 4, 2, 3, false};  // heads * head_dim = 6
  const std::vector<float> q = random_uniform(6 * 8, 40), kv = random_uniform(8 * 12, 41),
                           d_out = random_uniform(6 * 6, 42);
  std::vector<float> out(6 * 6), lse(2 * 2 * 3), grads_q(6 * 8), grads_kv(8 * 12);
  const std::vector<int32_t> lengths{4, 2};
  const AttentionOperands in{view(q, {6, 8}), view(kv, {8, 12}), view(kv, {8, 12}), 2, 0, 6};
  Tensor out_view = view(out, {6, 6}), lse_view = view(lse, {2, 2, 3});
  fused_attention_forward(in, view(lengths, {2}), out_view, lse_view, s, 0.0f, kKey);
  AttentionOperands grads{
      view(grads_q, {6, 8}), view(grads_kv, {8, 12}), view(grads_kv, {8, 12}), 2, 0, 6};
  auto backward = [&](const AttentionBiasGrads& bias_grads) {
    return fused_attention_backward(view(d_out, {6, 6}), in, out_view, lse_view, view(lengths, {2}),
                                    grads, s, 0.0f, kKey, Tensor(), bias_grads);
  };
  auto message_of = [&](const AttentionBiasGrads& bias_grads) {
    return invalid_argument_message([&] { backward(bias_grads); });
  };
  const std::vector<float> bias_q(6, 1.5f), bias_k(6, 2.5f), five(5), matrix(6);
  const std::vector<int32_t> ints(6);
  CHECK(message_of({view(bias_q, {6}), view(bias_k, {6}), Tensor()}).empty());
  CHECK(message_of({Tensor(), Tensor(), view(five, {5})})
            .find("fused_attention_backward: bias_grads.v has shape [5]") != std::string::npos);
  CHECK(message_of({view(matrix, {2, 3}), Tensor(), Tensor()})
            .find("fused_attention_backward: bias_grads.q has shape [2, 3]") != std::string::npos);
  CHECK(message_of({Tensor(), view(ints, {6}), Tensor()})
            .find("fused_attention_backward: bias_grads.k must be f32") != std::string::npos);
  // Labelled as GPU memory (never dereferenced: the check throws first).
  const Tensor elsewhere(const_cast<float*>(bias_q.data()), DType::f32, Device::cuda, {6});
  CHECK(message_of({elsewhere, Tensor(), Tensor()})
            .find("fused_attention_backward: bias_grads.q must be on the device of q") !=
        std::string::npos);
  // The CPU reference never sums them: false, and the values are what they were.
  std::vector<float> db_q = bias_q, db_k = bias_k;
  CHECK_FALSE(backward({view(db_q, {6}), view(db_k, {6}), Tensor()}));
  CHECK(db_q == bias_q);
  CHECK(db_k == bias_k);
}
