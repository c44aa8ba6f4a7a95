// The cuBLASLt products of kernels/cuda/linear.cpp as bench-kernels sets them up (bf16, row-major
// [rows, n] buffers as column-major views), shared by the gemm-algos and wgrad entries.
#pragma once

#include <cstdint>

#include "kernels/cuda/blas.h"

namespace nmt::bench {

// y = x Wᵀ (+ b, ReLU), dx = dy W, dW += dyᵀ x (f32).
enum class Pass { forward, forward_relu, dx, dw };

// The LtMatmul linear.cpp passes for a layer with W [out, in] at `rows` rows.
inline cuda::LtMatmul linear_product(Pass pass, int64_t in, int64_t out, int64_t rows) {
  cuda::LtMatmul g;
  g.ab_type = DType::bf16;
  g.c_type = DType::bf16;
  if (pass == Pass::forward || pass == Pass::forward_relu) {
    g.trans_a = CUBLAS_OP_T;  // yᵀ (out x rows) = Wᵀ-view · xᵀ
    g.m = out;
    g.n = rows;
    g.k = in;
    g.lda = in;
    g.ldb = in;
    g.ldc = out;
    g.relu = pass == Pass::forward_relu;
  } else if (pass == Pass::dx) {  // dxᵀ (in x rows) = W (in x out) · dyᵀ (out x rows)
    g.m = in;
    g.n = rows;
    g.k = out;
    g.lda = in;
    g.ldb = out;
    g.ldc = in;
  } else {  // dWᵀ (in x out) += xᵀ (in x rows) · op_T(dyᵀ), fp32
    g.trans_b = CUBLAS_OP_T;
    g.m = in;
    g.n = out;
    g.k = rows;
    g.lda = in;
    g.ldb = out;
    g.ldc = in;
    g.c_type = DType::f32;
    g.accumulate = true;
  }
  return g;
}

}  // namespace nmt::bench
