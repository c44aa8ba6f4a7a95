// cuBLAS / cuBLASLt access for the CUDA ops: per-thread handles, the dtype mapping, and a cuBLASLt
// matrix product whose descriptors and algorithm are chosen once per shape and cached.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt::cuda {

cudaDataType_t cuda_data_type(DType dtype);

// The calling thread's cuBLAS handle on the current device, bound to `stream` and to that
// stream's preallocated workspace (so a captured graph never allocates inside cuBLAS).
cublasHandle_t blas_handle(cudaStream_t stream);

// One column-major product D = alpha * op(A) op(B) (+ C when accumulate) (+ bias broadcast along
// the n columns when bias is set), with fp32 compute. op(A) is m x k, op(B) k x n, D m x n.
struct LtMatmul {
  cublasOperation_t trans_a = CUBLAS_OP_N;
  cublasOperation_t trans_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType ab_type = DType::f32;  // A and B
  DType c_type = DType::f32;   // C and D (and the bias)
  bool accumulate = false;     // beta = 1 instead of 0
  bool relu = false;           // D = max(D, 0) after the bias (cuBLASLt RELU / RELU_BIAS epilogue)
};

// a, b, c: device pointers laid out as described; bias: [m] of c_type or nullptr.
// With autotuning on (below), the first uncaptured use of a shape also times its candidates.
void lt_matmul(const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
               float alpha, cudaStream_t stream);

// Whether lt_matmul_bias_grad uses cuBLASLt's BGRADB epilogue (else it returns false and callers
// take the column sums of reduce.h). Off by default: on the H100 cuBLASLt ran the epilogue as a
// kernel of its own and a base step took 12.58 ms with it against 12.37 ms without (docs/perf.md).
// NMT_BIAS_GRAD_EPILOGUE=1 in the environment, or set_bias_grad_epilogue(true), turns it on.
void set_bias_grad_epilogue(bool on);
bool bias_grad_epilogue();

// The same product with cuBLASLt's BGRADB epilogue: bias_grad [n] of c_type is written (=) with
// the column sums of op(B) (the sum over k), in the product's own epilogue. Returns false, and
// runs nothing, when cuBLASLt has no algorithm for it (the answer is cached per shape), so the
// caller can fall back to a separate reduction. Not combined with `bias` or `relu`.
bool lt_matmul_bias_grad(const LtMatmul& g, const void* a, const void* b, void* c, void* bias_grad,
                         float alpha, cudaStream_t stream);

// Whether each product shape's algorithm is chosen by timing (off by default: the heuristic's
// single pick). On, the first use of a plan outside a graph capture times up to 16 algorithms the
// heuristic offers (blas_plan.h: autotune_algo), synchronising the stream once, and keeps the
// fastest if it beats the heuristic's pick by more than 3%. Accumulating products are timed on
// scratch outputs, so C still receives exactly one product. Determinism: the choice depends on
// timings, so two runs (or two ranks) may pick different algorithms for a shape and their results
// may differ in the last bits; within one run a plan keeps its choice. A plan first used while
// capturing runs the heuristic's pick in that graph and is tuned at its next uncaptured use.
// NMT_GEMM_AUTOTUNE=1 in the environment, or set_gemm_autotune(true), turns it on; turning it off
// returns every plan to the heuristic's pick.
void set_gemm_autotune(bool on);
bool gemm_autotune();

// What autotuning has done in this process: plans whose candidates were timed (those the
// heuristic offered one algorithm for are not), and of those the plans that kept another algorithm
// than the heuristic's pick.
struct GemmAutotuneCounts {
  long long timed = 0;
  long long changed = 0;
};
GemmAutotuneCounts gemm_autotune_counts();

}  // namespace nmt::cuda
