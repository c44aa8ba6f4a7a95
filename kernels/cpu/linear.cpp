// CPU reference of the linear layer, as three blocked products (kernels/cpu/gemm.h):
//   y = x · Wᵀ + b,   dx = dy · W,   dW += dyᵀ · x,   db += column sums of dy;
// and those column sums, which the fused backward tails (kernels/bias_grad_tails.h) share.
#include "kernels/cpu/linear.h"

#include <cstddef>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace nmt::cpu {

void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out) {
  // The product wants Wᵀ row-major ([in, out]) so its inner loop runs over contiguous outputs.
  // The copy is the size of W (small next to x) and reuses the calling thread's buffer.
  thread_local std::vector<float> w_transposed;  // [in, out]
  w_transposed.resize(static_cast<size_t>(in * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) w_transposed[i * out + o] = w[o * in + i];

  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) y[r * out + o] = b ? b[o] : 0.0f;
  gemm_accumulate(rows, out, in, x, in, 1, w_transposed.data(), out, y, out);
}

void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw,
                     float* db, int64_t rows, int64_t in, int64_t out, bool add_dx) {
  if (dx && add_dx) {
    thread_local std::vector<float> product;  // [rows, in]
    product.assign(static_cast<size_t>(rows * in), 0.0f);
    gemm_accumulate(rows, in, out, dy, out, 1, w, in, product.data(), in);
    for (int64_t i = 0; i < rows * in; ++i) dx[i] += product[static_cast<size_t>(i)];
  } else if (dx) {
    for (int64_t i = 0; i < rows * in; ++i) dx[i] = 0.0f;
    gemm_accumulate(rows, in, out, dy, out, 1, w, in, dx, in);
  }
  // dW[o, i] += sum_r dy[r, o] * x[r, i]: A = dyᵀ, read with swapped strides; each row o of dW is
  // owned by one thread, so no atomics and a fixed summation order.
  if (dw) gemm_accumulate(out, in, rows, dy, 1, out, x, in, dw, in);
  if (db) accumulate_column_sums(dy, rows, out, db);
}

void accumulate_column_sums(const float* matrix, int64_t rows, int64_t cols, float* out) {
  // Summed from zero, then added to out: the one order of linear_backward's db and the fused
  // tails' (kernels/bias_grad_tails.h), so the two agree bit for bit.
  thread_local std::vector<float> column_sums;  // [cols]
  column_sums.assign(static_cast<size_t>(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) column_sums[c] += matrix[r * cols + c];
  for (int64_t c = 0; c < cols; ++c) out[c] += column_sums[c];
}

}  // namespace nmt::cpu
