// The CUDA elementwise ops (kernels/elementwise.h dispatches here with the same signatures),
// enqueued on the current stream (kernels/cuda/stream.h) without synchronising. All tensors of one
// call share the shape and a float dtype unless a line says otherwise.
// Dtype contract (docs/cuda.md): T is the call's activation dtype (f32, bf16 or f16, one per call);
// parameter gradients and saved statistics are f32; reductions accumulate in fp32 or wider.
#pragma once

#include "kernels/philox.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx);
void residual_add(const Tensor& a, const Tensor& b, Tensor& y);
void add_inplace(Tensor& y, const Tensor& x);
void scale_inplace(Tensor& y, float s);
void fill_zero(Tensor& y);                            // any dtype
void copy_tensor(const Tensor& src, Tensor& dst);     // any dtype; either side may be on the host
void convert_tensor(const Tensor& src, Tensor& dst);  // float dtypes, both on the GPU
void dropout_forward(const Tensor& x, Tensor& y, float p, const RngKey& key);
void dropout_forward_positive_bits(const Tensor& x, Tensor& y, float p, const RngKey& key,
                                   Tensor& positive_bits);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, const RngKey& key);
// One pass each, bit-identical to the two ops they fuse (the 16-bit dropped-out value is rounded
// before the add, as dropout_forward's output was).
void dropout_residual_add(const Tensor& a, const Tensor& b, Tensor& y, float p, const RngKey& key);
void relu_dropout_backward(const Tensor& dy, const Tensor& y, Tensor& dx, float p);

}  // namespace nmt::cuda
