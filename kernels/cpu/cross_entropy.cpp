// CPU reference of the fused softmax cross-entropy. Per-row sums go to a buffer and are added in
// row order afterwards, so the totals do not depend on the thread count.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace nmt::cpu {
namespace {

struct RowLoss {
  double loss = 0;
  double nll = 0;
  bool correct = false;
};

}  // namespace

LossSums cross_entropy_forward_backward(const float* logits, const int32_t* targets, int64_t rows,
                                        int64_t vocab, int32_t pad_id, float smoothing,
                                        float grad_scale, float* d_logits) {
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] != pad_id && (targets[r] < 0 || targets[r] >= vocab))
      throw std::invalid_argument("cross_entropy_forward_backward: target " +
                                  std::to_string(targets[r]) + " at row " + std::to_string(r) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");

  std::vector<RowLoss> row_losses(static_cast<size_t>(rows));
  const double off_target = static_cast<double>(smoothing) / static_cast<double>(vocab);
  const double on_target = 1.0 - static_cast<double>(smoothing) + off_target;

#pragma omp parallel for schedule(static) if (rows * vocab > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    float* d_row = d_logits ? d_logits + r * vocab : nullptr;
    const int32_t target = targets[r];
    if (target == pad_id) {
      if (d_row)
        for (int64_t j = 0; j < vocab; ++j) d_row[j] = 0.0f;
      continue;
    }
    // Everything read from the row happens before the gradient overwrites it (in-place use).
    int64_t argmax = 0;
    for (int64_t j = 1; j < vocab; ++j)
      if (row[j] > row[argmax]) argmax = j;
    // Exponentials in float (they dominate the cost at a large vocabulary), sums in double.
    const float max_logit = row[argmax];
    double sum_exp = 0, sum_logits = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      sum_exp += std::exp(row[j] - max_logit);
      sum_logits += row[j];
    }
    const double log_sum_exp = max_logit + std::log(sum_exp);
    const float log_sum_exp_f = static_cast<float>(log_sum_exp);
    const double target_logit = row[target];
    // -sum_j q_j (l_j - lse) with q = (1 - smoothing) onehot + smoothing / vocab.
    RowLoss& result = row_losses[r];
    result.nll = log_sum_exp - target_logit;
    result.loss = log_sum_exp - (1.0 - smoothing) * target_logit - off_target * sum_logits;
    result.correct = argmax == target;
    if (d_row) {
      const float on_f = static_cast<float>(on_target), off_f = static_cast<float>(off_target);
      for (int64_t j = 0; j < vocab; ++j)
        d_row[j] = grad_scale * (std::exp(row[j] - log_sum_exp_f) - (j == target ? on_f : off_f));
    }
  }

  LossSums sums;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == pad_id) continue;
    sums.loss += row_losses[r].loss;
    sums.nll += row_losses[r].nll;
    sums.tokens += 1;
    sums.correct += row_losses[r].correct ? 1 : 0;
  }
  return sums;
}

}  // namespace nmt::cpu
