// Softmax cross-entropy over the vocabulary with label smoothing, ignoring padding targets.
#pragma once

#include "kernels/tensor.h"

namespace nmt {

struct LossSums {
  double loss = 0;     // sum over non-pad rows of the label-smoothed cross-entropy
  double nll = 0;      // sum over non-pad rows of -log p(target) (for perplexity)
  int64_t tokens = 0;  // non-pad rows
  int64_t correct = 0; // non-pad rows whose argmax equals the target
};

// logits:   [rows, vocab]
// targets:  [rows] i32; rows with target == pad_id count nothing and get zero gradient
// Smoothed target distribution q = (1 - smoothing) * onehot(target) + smoothing / vocab
// (PyTorch's CrossEntropyLoss(label_smoothing=...)); loss_row = -sum_j q_j log softmax(logits)_j.
// d_logits: [rows, vocab] written (=) with grad_scale * (softmax - q), or empty for no gradient.
//           It may alias logits (computed in place).
LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets,
                                        int32_t pad_id, float smoothing, float grad_scale,
                                        Tensor& d_logits);

}  // namespace nmt
