// Softmax cross-entropy with label smoothing: a hand-computed example, padding rows, accuracy
// counts, the logits gradient (also in place), shape and target errors.
#include <cstdint>
#include <vector>

#include "kernels/cross_entropy.h"
#include "test/kernels/kernel_test_util.h"
#include "test/support/catch.h"
#include "test/support/lib/gradcheck.h"

using namespace nmt;
using namespace nmt::test;

namespace {

constexpr int32_t kPad = 0;

LossSums run(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t vocab,
             float smoothing, float grad_scale, std::vector<float>* d_logits) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  Tensor d_view;
  if (d_logits) {
    d_logits->assign(logits.size(), NAN);  // every element must be written
    d_view = view(*d_logits, {rows, vocab});
  }
  return cross_entropy_forward_backward(view(logits, {rows, vocab}), view(targets, {rows}), kPad,
                                        smoothing, grad_scale, d_view);
}

}  // namespace

TEST_CASE("cross entropy with smoothing equals a hand computation on 1 x 3", "[cross_entropy]") {
  // logits (1, 2, 3), target 2, smoothing 0.1: lse = log(e + e^2 + e^3) = 3.4076059644;
  // q = (0.1/3, 0.1/3, 0.9 + 0.1/3); loss = -sum q_j (l_j - lse) = 0.5076059644;
  // nll = lse - 3 = 0.4076059644; grad = softmax - q.
  std::vector<float> d_logits;
  const LossSums sums = run({1, 2, 3}, {2}, 3, 0.1f, 1.0f, &d_logits);
  CHECK(sums.loss == Approx(0.5076059644).epsilon(1e-6));
  CHECK(sums.nll == Approx(0.4076059644).epsilon(1e-6));
  CHECK(sums.tokens == 1);
  CHECK(sums.correct == 1);
  CHECK(d_logits[0] == Approx(0.0566972398).epsilon(1e-5));
  CHECK(d_logits[1] == Approx(0.2113951377).epsilon(1e-5));
  CHECK(d_logits[2] == Approx(-0.2680923776).epsilon(1e-5));

  // grad_scale multiplies the gradient only.
  const LossSums scaled = run({1, 2, 3}, {2}, 3, 0.1f, 0.5f, &d_logits);
  CHECK(scaled.loss == sums.loss);
  CHECK(d_logits[2] == Approx(-0.5 * 0.2680923776).epsilon(1e-5));
}

TEST_CASE("pad rows give zero loss and zero gradient; accuracy counts argmax hits",
          "[cross_entropy]") {
  const int64_t vocab = 4;
  const std::vector<float> logits = {0.1f, 2.0f, 0.3f, -1.0f,  // argmax 1, target 1: correct
                                     5.0f, 1.0f, 0.0f, 0.0f,   // pad row
                                     0.0f, 0.5f, 0.2f, 3.0f};  // argmax 3, target 2: wrong
  std::vector<float> d_logits;
  const LossSums with_pad = run(logits, {1, kPad, 2}, vocab, 0.2f, 1.0f, &d_logits);
  CHECK(with_pad.tokens == 2);
  CHECK(with_pad.correct == 1);
  for (int64_t j = 0; j < vocab; ++j) CHECK(d_logits[static_cast<size_t>(vocab + j)] == 0.0f);

  // The same two rows without the pad row give the same sums.
  const std::vector<float> two_rows = {0.1f, 2.0f, 0.3f, -1.0f, 0.0f, 0.5f, 0.2f, 3.0f};
  const LossSums without = run(two_rows, {1, 2}, vocab, 0.2f, 1.0f, nullptr);
  CHECK(with_pad.loss == Approx(without.loss));
  CHECK(with_pad.nll == Approx(without.nll));
  const LossSums all_pad = run(logits, {kPad, kPad, kPad}, vocab, 0.2f, 1.0f, &d_logits);
  CHECK(all_pad.loss == 0.0);
  CHECK(all_pad.tokens == 0);
  for (float g : d_logits) CHECK(g == 0.0f);
}

TEST_CASE("cross entropy gradient matches finite differences", "[cross_entropy][gradcheck]") {
  for (float smoothing : {0.0f, 0.1f}) {
    for (int64_t vocab : {1, 3, 7, 33}) {
      const int64_t rows = 5;
      const std::vector<float> logits = random_uniform(static_cast<size_t>(rows * vocab), 9, -3, 3);
      std::vector<int32_t> targets;
      for (int64_t r = 0; r < rows; ++r)
        targets.push_back(static_cast<int32_t>((r * 5 + 1) % vocab));
      targets[2] = kPad;  // id 0 doubles as a pad row (and vocab 1 makes every row pad)
      std::vector<float> d_logits;
      run(logits, targets, vocab, smoothing, 1.0f, &d_logits);
      const auto result = check_gradient(
          [&](const std::vector<float>& x) {
            return run(x, targets, vocab, smoothing, 1.0f, nullptr).loss;
          },
          logits, d_logits, GradCheckOptions{1e-3, 1e-2, 0});
      INFO("smoothing " << smoothing << " vocab " << vocab << ": " << result.describe());
      CHECK(result.max_rel_error < 1e-2);
    }
  }
}

TEST_CASE("cross entropy gradient may overwrite the logits", "[cross_entropy]") {
  const int64_t rows = 3, vocab = 13;
  const std::vector<float> logits = random_uniform(static_cast<size_t>(rows * vocab), 10, -2, 2);
  const std::vector<int32_t> targets = {4, kPad, 12};
  std::vector<float> separate;
  const LossSums expected = run(logits, targets, vocab, 0.1f, 0.25f, &separate);
  std::vector<float> in_place = logits;
  Tensor in_place_view = view(in_place, {rows, vocab});
  const LossSums got = cross_entropy_forward_backward(in_place_view, view(targets, {rows}), kPad,
                                                      0.1f, 0.25f, in_place_view);
  CHECK(got.loss == expected.loss);
  CHECK(in_place == separate);
}

TEST_CASE("cross entropy into a sums buffer gives the returned sums and the same gradient",
          "[cross_entropy]") {
  const int64_t rows = 4, vocab = 11;
  const std::vector<float> logits = random_uniform(static_cast<size_t>(rows * vocab), 12, -3, 3);
  const std::vector<int32_t> targets = {4, kPad, 10, 1};
  std::vector<float> expected_grad;
  const LossSums expected = run(logits, targets, vocab, 0.1f, 0.5f, &expected_grad);
  std::vector<float> grad(logits.size(), NAN);
  std::vector<int32_t> sums_words(kLossSumsWords, -1);
  Tensor grad_view = view(grad, {rows, vocab}), sums = view(sums_words, {kLossSumsWords});
  cross_entropy_forward_backward_into(view(logits, {rows, vocab}), view(targets, {rows}), kPad,
                                      0.1f, 0.5f, grad_view, sums);
  const LossSums got = read_loss_sums(sums, vocab);
  CHECK(got.loss == expected.loss);
  CHECK(got.nll == expected.nll);
  CHECK(got.tokens == expected.tokens);
  CHECK(got.correct == expected.correct);
  CHECK(grad == expected_grad);
  // A sums buffer of the wrong size is refused, naming it.
  std::vector<int32_t> short_words(3);
  Tensor short_sums = view(short_words, {3});
  const std::string message = invalid_argument_message([&] {
    cross_entropy_forward_backward_into(view(logits, {rows, vocab}), view(targets, {rows}), kPad,
                                        0.1f, 0.5f, grad_view, short_sums);
  });
  CHECK(message.find("cross_entropy_forward_backward_into: sums") != std::string::npos);
}

TEST_CASE("cross entropy rejects bad targets and shapes, naming the op",
          "[cross_entropy][errors]") {
  const std::vector<float> logits(6);
  std::vector<float> d(6);
  Tensor none, d_wrong = view(d, {3, 2});
  std::string message = invalid_argument_message([&] {
    cross_entropy_forward_backward(view(logits, {2, 3}), view(std::vector<int32_t>{1, 3}, {2}),
                                   kPad, 0.1f, 1.0f, none);
  });
  CHECK(message.find("cross_entropy_forward_backward") != std::string::npos);
  CHECK(message.find("target 3") != std::string::npos);
  message = invalid_argument_message([&] {
    cross_entropy_forward_backward(view(logits, {2, 3}), view(std::vector<int32_t>{1, 2}, {2}),
                                   kPad, 0.1f, 1.0f, d_wrong);
  });
  CHECK(message.find("cross_entropy_forward_backward: d_logits") != std::string::npos);
  message = invalid_argument_message([&] {
    cross_entropy_forward_backward(view(logits, {2, 3}), view(std::vector<int32_t>{1, 2, 0}, {3}),
                                   kPad, 0.1f, 1.0f, none);
  });
  CHECK(message.find("cross_entropy_forward_backward: targets") != std::string::npos);
}
