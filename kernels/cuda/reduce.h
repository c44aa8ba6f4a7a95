// Deterministic column sums on the GPU (bias and LayerNorm parameter gradients): per-part partial
// sums in a fixed grid, then a second pass that adds the parts in order. No float atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tensor.h"

namespace nmt::cuda {

// out[c] += sum over p in [0, parts) of partials[p * cols + c], summed in a fixed order.
// partials: [parts, cols] f32; out: [cols] f32.
void accumulate_partial_sums(const float* partials, int64_t parts, int64_t cols, float* out,
                             cudaStream_t stream);

// The same for two sums in one launch: partials: [parts, 2 * cols], the first cols columns added
// to first[cols], the others to second[cols].
void accumulate_partial_sum_pair(const float* partials, int64_t parts, int64_t cols, float* first,
                                 float* second, cudaStream_t stream);

// out[c] += sum over rows of matrix[r, c]. matrix: [rows, cols] of a float dtype; out: [cols] f32.
// Takes its partial sums from the stream's scratch memory.
void accumulate_column_sums(const Tensor& matrix, float* out, cudaStream_t stream);

}  // namespace nmt::cuda
