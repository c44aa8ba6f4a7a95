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

// The shared-memory row kernel (cross_entropy.cu: rows of 16-byte packs up to 72 KiB, e.g. bf16
// vocabularies of 4096 to 36864) is on by default; NMT_CROSS_ENTROPY_SMEM=0 in the environment, or
// set_cross_entropy_smem(false), sends every row to the register kernel (to time the two).
void set_cross_entropy_smem(bool on);
bool cross_entropy_smem();
// Whether 16-byte aligned logits [rows, vocab] of `dtype` take the shared-memory row kernel on the
// current GPU, the switch included (for the tests and bench-kernels).
bool cross_entropy_smem_rows(DType dtype, int64_t vocab);

}  // namespace nmt::cuda
