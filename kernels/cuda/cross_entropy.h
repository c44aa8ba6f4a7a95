// The CUDA fused label-smoothed cross-entropy (kernels/cross_entropy.h dispatches here with the
// same signature). It synchronises the current stream to return the host sums.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// logits: [rows, vocab] T; targets: [rows] i32; d_logits: [rows, vocab] T (may alias logits) or
// empty. Synchronises the current stream to return the sums; throws std::invalid_argument for a
// target outside [0, vocab) that is not pad_id.
LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits);
// Enqueue-only: the sums go to `sums` ([kLossSumsWords] i32 on the GPU) for read_loss_sums.
void cross_entropy_forward_backward_into(const Tensor& logits, const Tensor& targets,
                                         int32_t pad_id, float smoothing, float grad_scale,
                                         Tensor& d_logits, Tensor& sums);
LossSums read_loss_sums(const Tensor& sums, int64_t vocab);

}  // namespace nmt::cuda
