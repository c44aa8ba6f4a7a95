// Deterministic column sums on the GPU (bias and LayerNorm parameter gradients): partial sums per
// part of the rows in a fixed grid, then the parts added in a fixed order. No float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt::cuda {

// first[c] += sum over p in [0, parts) of partials[p * 2 * cols + c], second[c] += the same of
// column cols + c, each summed in a fixed order. partials: [parts, 2 * cols] f32 (another kernel's
// output); first, second: [cols] f32.
void accumulate_partial_sum_pair(const float* partials, int64_t parts, int64_t cols, float* first,
                                 float* second, cudaStream_t stream);
// As accumulate_partial_sum_pair with a third output from columns [2 * cols, 3 * cols):
// partials: [parts, 3 * cols] f32; first, second, third: [cols] f32. Each column is summed in the
// pair's order, so first and second get the bits the pair gives for the same partials.
void accumulate_partial_sum_triple(const float* partials, int64_t parts, int64_t cols, float* first,
                                   float* second, float* third, cudaStream_t stream);

// out[c] += sum over rows of matrix[r, c], in an order fixed by the shape (the same bits on every
// run, whatever the GPU's size). matrix: [rows, cols] f32, bf16 or f16 at any alignment (16-byte
// loads where the pointer is 16-byte aligned and cols a multiple of 8 for bf16 / f16, 4 for f32;
// one element at a time otherwise); out: [cols] f32. One launch (one per 4096 column tiles), with
// its partial sums in the stream's scratch and its per-tile counters in the stream's zeroed
// counters (kernels/cuda/scratch.h).
void accumulate_column_sums(const Tensor& matrix, float* out, cudaStream_t stream);

}  // namespace nmt::cuda
