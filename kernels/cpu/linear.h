// CPU reference of the linear layer y = x · Wᵀ + b (W is [out, in]) and its backward.
#pragma once

#include <cstdint>

namespace nmt::cpu {

// x: [rows, in]; w: [out, in]; b: [out] or nullptr; y: [rows, out] written (=), no aliasing.
void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out);

// dy: [rows, out]; x: [rows, in]; w: [out, in].
// dx: [rows, in] written (=), or added to (+=) when add_dx, or nullptr to skip; dw: [out, in]
// accumulated (+=), or nullptr; db: [out] accumulated (+=), or nullptr. Added, dx[i] becomes dx[i] + the
// product's sum (the sum formed from zero first, as a separate add of it would).
void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw,
                     float* db, int64_t rows, int64_t in, int64_t out, bool add_dx = false);

// out[c] += the sum over rows of matrix[r, c], rows added in order in f32 from zero, then added to
// out: linear_backward's db. matrix: [rows, cols]; out: [cols].
void accumulate_column_sums(const float* matrix, int64_t rows, int64_t cols, float* out);

}  // namespace nmt::cpu
