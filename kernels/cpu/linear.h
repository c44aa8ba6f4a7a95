// CPU reference of the linear layer y = x · Wᵀ + b (W is [out, in]) and its backward.
#pragma once

#include <cstdint>

namespace nmt::cpu {

// x: [rows, in]; w: [out, in]; b: [out] or nullptr; y: [rows, out] written (=), no aliasing.
void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out);

// dy: [rows, out]; x: [rows, in]; w: [out, in].
// dx: [rows, in] written (=), or nullptr to skip; dw: [out, in] accumulated (+=);
// db: [out] accumulated (+=), or nullptr.
void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw,
                     float* db, int64_t rows, int64_t in, int64_t out);

}  // namespace nmt::cpu
