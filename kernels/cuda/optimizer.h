// The CUDA optimizer ops (kernels/optimizer.h dispatches here with the same signatures): the sum
// of squares and read_grad_clip synchronise the current stream to return a host value;
// grad_clip_into and the updates do not (the updates read a GradScale's record on the device).
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include "kernels/optimizer.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

// x: any shape, f32, bf16 or f16. Synchronises the current stream to return the sum.
double sum_of_squares(const Tensor& x);
// x: any shape, f32, bf16 or f16; clip: [kGradClipWords] i32. The sum as sum_of_squares's, then
// the record, all on the current stream.
void grad_clip_into(const Tensor& x, double divisor, float max_norm, Tensor& clip);
// clip: [kGradClipWords] i32. Synchronises the current stream.
GradClip read_grad_clip(const Tensor& clip);
// param, grad, m, v: same shape, f32; one launch over the flat buffers. compute: nullptr or the
// working copy (same shape, f32/bf16/f16), written with the updated parameters in the same pass.
void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                 GradScale grad_scale, Tensor* compute = nullptr);
// param, grad, m, v: [rows, cols] f32; rows whose gradient is all zeros are left untouched (and
// their working-copy rows too).
void lazy_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h,
                      GradScale grad_scale, Tensor* compute = nullptr);

}  // namespace nmt::cuda
