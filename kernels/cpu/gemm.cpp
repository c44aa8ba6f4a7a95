// Blocked C += A·B for the CPU reference: four rows of C at a time, a strip of columns held in
// local accumulators (L1-resident), the inner loop an axpy over contiguous columns of B.
#include "kernels/cpu/gemm.h"

#include <algorithm>

#include "kernels/cpu/vectorize.h"

namespace nmt::cpu {
namespace {

constexpr int64_t kRows = 4;    // rows of C per block: each load of B feeds four multiply-adds
constexpr int64_t kCols = 128;  // columns per strip: 4 x 128 accumulators = 2 KiB, stay in L1

// c[0..4) x [0, cols) += a(0..4, p) * b[p, 0..cols) over p; cols <= kCols.
NMT_CPU_CLONES void gemm_block4(int64_t cols, int64_t k, const float* a, int64_t a_row_stride,
                                int64_t a_inner_stride, const float* b, int64_t ldb, float* c,
                                int64_t ldc) {
  // Local arrays cannot alias a, b or c, so the j loop vectorises without runtime overlap checks.
  float acc0[kCols], acc1[kCols], acc2[kCols], acc3[kCols];
  for (int64_t j = 0; j < cols; ++j) {
    acc0[j] = c[j];
    acc1[j] = c[ldc + j];
    acc2[j] = c[2 * ldc + j];
    acc3[j] = c[3 * ldc + j];
  }
  for (int64_t p = 0; p < k; ++p) {
    const float a0 = a[p * a_inner_stride];
    const float a1 = a[a_row_stride + p * a_inner_stride];
    const float a2 = a[2 * a_row_stride + p * a_inner_stride];
    const float a3 = a[3 * a_row_stride + p * a_inner_stride];
    const float* b_row = b + p * ldb;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const float bj = b_row[j];
      acc0[j] += a0 * bj;
      acc1[j] += a1 * bj;
      acc2[j] += a2 * bj;
      acc3[j] += a3 * bj;
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    c[j] = acc0[j];
    c[ldc + j] = acc1[j];
    c[2 * ldc + j] = acc2[j];
    c[3 * ldc + j] = acc3[j];
  }
}

// The same for one row of C (the m % 4 rows left over).
NMT_CPU_CLONES void gemm_block1(int64_t cols, int64_t k, const float* a, int64_t a_inner_stride,
                                const float* b, int64_t ldb, float* c) {
  float acc[kCols];
  for (int64_t j = 0; j < cols; ++j) acc[j] = c[j];
  for (int64_t p = 0; p < k; ++p) {
    const float a0 = a[p * a_inner_stride];
    const float* b_row = b + p * ldb;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) acc[j] += a0 * b_row[j];
  }
  for (int64_t j = 0; j < cols; ++j) c[j] = acc[j];
}

}  // namespace

void gemm_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row_stride,
                     int64_t a_inner_stride, const float* b, int64_t ldb, float* c, int64_t ldc,
                     bool allow_threads) {
  const int64_t row_blocks = (m + kRows - 1) / kRows;
  // Threads only pay off beyond a few thousand multiply-adds (decoding runs many tiny products).
#pragma omp parallel for schedule(static) if (allow_threads && m * n * k > 32768)
  for (int64_t block = 0; block < row_blocks; ++block) {
    const int64_t i0 = block * kRows;
    const int64_t block_rows = std::min(kRows, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kCols) {
      const int64_t cols = std::min(kCols, n - j0);
      if (block_rows == kRows) {
        gemm_block4(cols, k, a + i0 * a_row_stride, a_row_stride, a_inner_stride, b + j0, ldb,
                    c + i0 * ldc + j0, ldc);
      } else {
        for (int64_t i = i0; i < m; ++i)
          gemm_block1(cols, k, a + i * a_row_stride, a_inner_stride, b + j0, ldb, c + i * ldc + j0);
      }
    }
  }
}

}  // namespace nmt::cpu
