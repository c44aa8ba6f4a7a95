// Linear layer y = x · Wᵀ + b (PyTorch's nn.Linear layout: W is [out, in]).
#pragma once

#include "kernels/tensor.h"

namespace nmt {

// x: [rows, in]; w: [out, in]; b: [out] or empty (no bias); y: [rows, out] written (=).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// y = max(x · Wᵀ + b, 0): the same shapes; on the GPU the ReLU is the GEMM's epilogue (no extra
// pass over y). Its backward is relu_backward (kernels/elementwise.h) on y, then linear_backward.
void linear_relu_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// dy: [rows, out]. dx: [rows, in] written (=), or empty to skip. dw: [out, in] and db: [out]
// accumulated (+=); db may be empty.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                     Tensor& db);

}  // namespace nmt
