// The one matrix product the CPU reference needs (linear forward/backward), written as blocked
// loops that the compiler vectorises, parallel over output rows with OpenMP.
#pragma once

#include <cstdint>

namespace nmt::cpu {

// c[i, j] += sum_p a(i, p) * b[p, j] for i < m, j < n, p < k, where
//   a(i, p) = a[i * a_row_stride + p * a_inner_stride]   (so a transposed A is a stride swap),
//   b: [k, ldb] row-major, c: [m, ldc] row-major.
// Every c[i, j] is summed in the order p = 0, 1, ..., k-1 onto its old value by one thread, so the
// result is bit-identical for any thread count. c must not overlap a or b. allow_threads = false
// keeps the call on the calling thread (for products inside an already parallel loop).
void gemm_accumulate(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_row_stride,
                     int64_t a_inner_stride, const float* b, int64_t ldb, float* c, int64_t ldc,
                     bool allow_threads = true);

}  // namespace nmt::cpu
