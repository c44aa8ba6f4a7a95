// Deterministic column sums: partial sums per block of rows, then an ordered sum of the parts.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"

namespace nmt::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kColumnsPerBlock = 256;
constexpr int64_t kRowsPerPart = 64;
constexpr int64_t kMaxParts = 1024;

// Block (32 columns) x (32 part lanes): lane y sums parts y, y+32, ...; then row y = 0 adds the 32
// lane sums in order. Every run adds the same numbers in the same order.
// Columns [0, split) go to first, [split, cols) to second.
__global__ void accumulate_partial_sums_kernel(const float* __restrict__ partials, int64_t parts,
                                               int64_t cols, int64_t split, float* first,
                                               float* second) {
  __shared__ float lane_sums[kTile][kTile + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t p = threadIdx.y; p < parts; p += kTile) sum += partials[p * cols + col];
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kTile; ++j) total += lane_sums[j][threadIdx.x];
    if (col < split)
      first[col] += total;
    else
      second[col - split] += total;
  }
}

// grid (column tiles, parts): each thread sums one column over one part's rows.
template <typename T>
__global__ void column_partial_sums_kernel(const T* __restrict__ matrix, int64_t rows, int64_t cols,
                                           int64_t rows_per_part, float* __restrict__ partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  if (col >= cols) return;
  const int64_t begin = blockIdx.y * rows_per_part;
  const int64_t end = min(rows, begin + rows_per_part);
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) sum += to_float(matrix[r * cols + col]);
  partials[blockIdx.y * cols + col] = sum;
}

}  // namespace

void accumulate_partial_sums(const float* partials, int64_t parts, int64_t cols, float* out,
                             cudaStream_t stream) {
  if (cols == 0 || parts == 0) return;
  accumulate_partial_sums_kernel<<<blocks_for(cols, kTile), dim3(kTile, kTile), 0, stream>>>(
      partials, parts, cols, cols, out, nullptr);
  CUDA_CHECK_LAUNCH();
}

void accumulate_partial_sum_pair(const float* partials, int64_t parts, int64_t cols, float* first,
                                 float* second, cudaStream_t stream) {
  if (cols == 0 || parts == 0) return;
  accumulate_partial_sums_kernel<<<blocks_for(2 * cols, kTile), dim3(kTile, kTile), 0, stream>>>(
      partials, parts, 2 * cols, cols, first, second);
  CUDA_CHECK_LAUNCH();
}

void accumulate_column_sums(const Tensor& matrix, float* out, cudaStream_t stream) {
  const int64_t rows = matrix.dim(0), cols = matrix.dim(1);
  if (rows == 0 || cols == 0) return;
  const int64_t parts = std::min(kMaxParts, (rows + kRowsPerPart - 1) / kRowsPerPart);
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  auto* partials = static_cast<float*>(
      stream_resources(stream).scratch(static_cast<size_t>(parts * cols) * sizeof(float)));
  dispatch_float_dtype(matrix.dtype, "accumulate_column_sums", "matrix", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid(blocks_for(cols, kColumnsPerBlock), static_cast<unsigned>(parts));
    column_partial_sums_kernel<T><<<grid, kColumnsPerBlock, 0, stream>>>(
        static_cast<const T*>(matrix.data), rows, cols, rows_per_part, partials);
    CUDA_CHECK_LAUNCH();
  });
  accumulate_partial_sums(partials, parts, cols, out, stream);
}

}  // namespace nmt::cuda
