// bench-kernels' column-sum rows. The old two-kernel column sums live here only, as the reference
// the engine's one-launch version (kernels/cuda/reduce.cu) is timed against.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/bench-kernels/bench_column_sums.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"

namespace nmt::bench {
namespace {

constexpr int kOldTile = 32;
constexpr int kOldColumnsPerBlock = 256;
constexpr int64_t kOldRowsPerPart = 64;
constexpr int64_t kOldMaxParts = 1024;

// The old first pass: grid (column tiles, parts), one thread per column and part, one scalar load
// per row. partials: [parts, cols] f32.
template <typename T>
__global__ void old_column_partial_sums(const T* __restrict__ matrix, int64_t rows, int64_t cols,
                                        int64_t rows_per_part, float* __restrict__ partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kOldColumnsPerBlock + threadIdx.x;
  if (col >= cols) return;
  const int64_t begin = blockIdx.y * rows_per_part;
  const int64_t end = min(rows, begin + rows_per_part);
  float sum = 0.0f;
  for (int64_t r = begin; r < end; ++r) sum += cuda::to_float(matrix[r * cols + col]);
  partials[blockIdx.y * cols + col] = sum;
}

// The old second pass: block (32 columns) x (32 part lanes), lanes added in order. out: [cols].
__global__ void old_accumulate_partial_sums(const float* __restrict__ partials, int64_t parts,
                                            int64_t cols, float* out) {
  __shared__ float lane_sums[kOldTile][kOldTile + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kOldTile + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t p = threadIdx.y; p < parts; p += kOldTile) sum += partials[p * cols + col];
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kOldTile; ++j) total += lane_sums[j][threadIdx.x];
    out[col] += total;
  }
}

// matrix: [rows, cols] bf16; partials: [min(1024, ceil(rows / 64)), cols] f32; out: [cols] f32.
void old_column_sums(const Tensor& matrix, float* partials, float* out) {
  const int64_t rows = matrix.dim(0), cols = matrix.dim(1);
  const int64_t parts = std::min(kOldMaxParts, (rows + kOldRowsPerPart - 1) / kOldRowsPerPart);
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  cudaStream_t stream = cuda::current_stream();
  const dim3 grid(cuda::blocks_for(cols, kOldColumnsPerBlock), static_cast<unsigned>(parts));
  old_column_partial_sums<__nv_bfloat16><<<grid, kOldColumnsPerBlock, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(matrix.data), rows, cols, rows_per_part, partials);
  CUDA_CHECK_LAUNCH();
  old_accumulate_partial_sums<<<cuda::blocks_for(cols, kOldTile), dim3(kOldTile, kOldTile), 0,
                                stream>>>(partials, parts, cols, out);
  CUDA_CHECK_LAUNCH();
}

std::vector<float> to_host(const float* device, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

void bench_shape(KernelTimer& timer, ReportRow report, int64_t rows, int64_t cols) {
  const int64_t parts = std::min(kOldMaxParts, (rows + kOldRowsPerPart - 1) / kOldRowsPerPart);
  DeviceTensor matrix_memory({rows, cols}, DType::bf16), old_out_memory({cols}, DType::f32),
      new_out_memory({cols}, DType::f32), partials_memory({parts * cols}, DType::f32);
  const Tensor& matrix = matrix_memory.view;
  auto* old_out = static_cast<float*>(old_out_memory.view.data);
  auto* new_out = static_cast<float*>(new_out_memory.view.data);
  auto* partials = static_cast<float*>(partials_memory.view.data);
  fill_uniform(matrix, -1, 1, 41);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  // Read once, plus out read and written.
  const double bytes = static_cast<double>(rows * cols) * 2 + static_cast<double>(cols) * 8;
  // One call each from zero: the two orders differ, so the sums agree to rounding, not in bits.
  old_column_sums(matrix, partials, old_out);
  cuda::accumulate_column_sums(matrix, new_out, cuda::current_stream());
  const std::vector<float> old_sums = to_host(old_out, cols), new_sums = to_host(new_out, cols);
  double largest = 0;
  for (int64_t c = 0; c < cols; ++c)
    largest = std::max(largest, std::fabs(static_cast<double>(old_sums[c]) - new_sums[c]));
  double ms = timer.median_ms([&] { old_column_sums(matrix, partials, old_out); });
  report("column_sums bf16 (old)", shape, ms, gb_per_s(bytes, ms), "GB/s");
  ms = timer.median_ms(
      [&] { cuda::accumulate_column_sums(matrix, new_out, cuda::current_stream()); });
  report("column_sums bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  std::printf("  largest |engine - old| over the %lld column sums of one call: %.3g\n",
              static_cast<long long>(cols), largest);
}

}  // namespace

void bench_column_sums(KernelTimer& timer, ReportRow report) {
  for (int64_t cols : {512, 1024, 1536, 2048}) bench_shape(timer, report, 8192, cols);
}

}  // namespace nmt::bench
