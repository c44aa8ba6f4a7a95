// Softmax cross-entropy over the vocabulary with label smoothing, ignoring padding targets.
#pragma once

#include "kernels/tensor.h"

namespace nmt {

struct LossSums {
  double loss = 0;      // sum over non-pad rows of the label-smoothed cross-entropy
  double nll = 0;       // sum over non-pad rows of -log p(target) (for perplexity)
  int64_t tokens = 0;   // non-pad rows
  int64_t correct = 0;  // non-pad rows whose argmax equals the target
};

// logits:   [rows, vocab]
// targets:  [rows] i32; rows with target == pad_id count nothing and get zero gradient
// Smoothed target distribution q = (1 - smoothing) * onehot(target) + smoothing / vocab
// (PyTorch's CrossEntropyLoss(label_smoothing=...)); loss_row = -sum_j q_j log softmax(logits)_j.
// d_logits: [rows, vocab] written (=) with grad_scale * (softmax - q), or empty for no gradient.
//           It may alias logits (computed in place).
LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits);

// The same loss, leaving its sums in `sums` instead of returning them: on the GPU this enqueues
// work only (no host read, no synchronisation), so a training step goes on enqueueing its backward
// and can be captured into a CUDA graph; read_loss_sums reads them afterwards (the GPU's check of
// the targets is reported there). On the CPU the sums are computed and stored at once.
// sums: [kLossSumsWords] i32 on the logits' device, kept by the caller until read_loss_sums.
inline constexpr int64_t kLossSumsWords = 16;
void cross_entropy_forward_backward_into(const Tensor& logits, const Tensor& targets,
                                         int32_t pad_id, float smoothing, float grad_scale,
                                         Tensor& d_logits, Tensor& sums);
// The sums the last cross_entropy_forward_backward_into left in `sums` (synchronises the GPU's
// current stream). Throws std::invalid_argument for a target outside [0, vocab) that is not the
// pad id, as cross_entropy_forward_backward does.
LossSums read_loss_sums(const Tensor& sums, int64_t vocab);

}  // namespace nmt
