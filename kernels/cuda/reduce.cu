// Deterministic column sums. accumulate_column_sums: one launch over (column tiles, row parts)
// whose last block per tile adds the parts in order; accumulate_partial_sum_pair: an ordered sum of
// parts that another kernel wrote (LayerNorm's parameter gradients).
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"

namespace nmt::cuda {
namespace {

constexpr int kTile = 32;

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

// ---- accumulate_column_sums ----
//
// grid (column tiles, row parts), block (kLanesX, kLanesY) = 256 threads. Thread (x, y) owns VEC
// adjacent columns of the tile (one 16-byte load per row where VEC > 1) and sums rows y, y +
// kLanesY, ... of its part in row order; the block adds its kLanesY lanes in a fixed tree and
// writes one f32 partial row of the tile. The block that finishes a tile last (an atomic counter
// per tile) adds the parts in a fixed order into out. Which block comes last varies from run to
// run; what it adds, and in which order, does not.

constexpr int kColumnSumThreads = 256;
// Rows per part at least (4 unrolled loads for each of the vector path's 32 lanes) and parts at
// most: the partials cost 8 bytes per part and column against 2 per row and column of a bf16
// input, about 3% here, and the last block's ordered sum stays short.
constexpr int64_t kMinRowsPerPart = 128;
constexpr int64_t kMaxParts = 256;
constexpr int kRowUnroll = 4;

template <int VEC>
struct ColumnSumLayout {
  // 8 lanes of 16 bytes read 128 contiguous bytes of a row; the scalar path reads 32 elements.
  static constexpr int kLanesX = VEC == 1 ? 32 : 8;
  static constexpr int kLanesY = kColumnSumThreads / kLanesX;
  static constexpr int kTileCols = kLanesX * VEC;
  // The lane sums are added in groups of VEC lanes (kGroups groups per column), then the groups.
  static constexpr int kGroups = kColumnSumThreads / kTileCols;
  static_assert(kGroups * VEC == kLanesY, "each group adds VEC consecutive lanes");
};

// lane_sums: [kLanesY][kTileCols], filled by every thread before the call. Returns, to thread t <
// kTileCols, the sum over lanes of column t: lanes g * VEC .. g * VEC + VEC - 1 in order for each
// group g, then the groups in order. Begins and ends with a barrier.
template <int VEC>
__device__ float add_lanes(const float* lane_sums, float* group_sums) {
  using L = ColumnSumLayout<VEC>;
  const int t = threadIdx.y * L::kLanesX + threadIdx.x;
  const int col = t % L::kTileCols, group = t / L::kTileCols;
  __syncthreads();
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < VEC; ++j) sum += lane_sums[(group * VEC + j) * L::kTileCols + col];
  group_sums[group * L::kTileCols + col] = sum;
  __syncthreads();
  float total = 0.0f;
  if (t < L::kTileCols) {
#pragma unroll
    for (int g = 0; g < L::kGroups; ++g) total += group_sums[g * L::kTileCols + col];
  }
  __syncthreads();
  return total;
}

// Thread (x, y)'s VEC sums into lane_sums [kLanesY][kTileCols] at row y, columns x * VEC...:
// 16-byte stores where VEC > 1 (fewer instructions and bank conflicts than one float at a time).
template <int VEC>
__device__ __forceinline__ void store_lane_sums(float* lane_sums, const float (&sums)[VEC]) {
  using L = ColumnSumLayout<VEC>;
  float* at = lane_sums + threadIdx.y * L::kTileCols + threadIdx.x * VEC;
  if constexpr (VEC == 1) {
    at[0] = sums[0];
  } else {
#pragma unroll
    for (int i = 0; i < VEC; i += 4)
      *reinterpret_cast<float4*>(at + i) =
          make_float4(sums[i], sums[i + 1], sums[i + 2], sums[i + 3]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void add_row(const T* __restrict__ at, float (&acc)[VEC]) {
  const Pack<T, VEC> v = *reinterpret_cast<const Pack<T, VEC>*>(at);
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] += to_float(v.v[i]);
}

// matrix: [rows, cols] T, 16-byte aligned with cols % VEC == 0 where VEC > 1. partials: [tiles,
// parts, kTileCols] f32 (tiles = gridDim.x, parts = gridDim.y). counters: [tiles], zero on entry
// and on exit. out: [cols] f32, += the column sums. The grid covers tiles first_tile, first_tile +
// 1, ... (more tiles than counters take several launches).
template <typename T, int VEC>
__global__ void __launch_bounds__(kColumnSumThreads)
    column_sums_kernel(const T* __restrict__ matrix, int64_t rows, int64_t cols,
                       int64_t rows_per_part, int64_t first_tile, float* __restrict__ partials,
                       unsigned* __restrict__ counters, float* __restrict__ out) {
  using L = ColumnSumLayout<VEC>;
  __shared__ alignas(16) float lane_sums[L::kLanesY * L::kTileCols];
  __shared__ float group_sums[L::kGroups * L::kTileCols];
  __shared__ bool last_block;
  const int x = threadIdx.x, y = threadIdx.y, t = y * L::kLanesX + x;
  const int64_t tile_col = (first_tile + blockIdx.x) * L::kTileCols;
  const int64_t col = tile_col + x * VEC;  // the first of this thread's VEC columns
  const unsigned parts = gridDim.y;

  float acc[VEC] = {};
  if (col < cols) {  // with VEC > 1, cols % VEC == 0: all VEC columns are in range, or none
    const int64_t end = min(rows, (blockIdx.y + 1) * rows_per_part);
    int64_t r = blockIdx.y * rows_per_part + y;
    // kRowUnroll independent loads in flight, then added in row order.
    for (; r + (kRowUnroll - 1) * L::kLanesY < end; r += kRowUnroll * L::kLanesY) {
      Pack<T, VEC> v[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u)
        v[u] = *reinterpret_cast<const Pack<T, VEC>*>(matrix + (r + u * L::kLanesY) * cols + col);
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u)
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] += to_float(v[u].v[i]);
    }
    for (; r < end; r += L::kLanesY) add_row<T, VEC>(matrix + r * cols + col, acc);
  }
  store_lane_sums<VEC>(lane_sums, acc);
  float total = add_lanes<VEC>(lane_sums, group_sums);

  if (parts > 1) {
    float* tile_partials = partials + static_cast<int64_t>(blockIdx.x) * parts * L::kTileCols;
    if (t < L::kTileCols) tile_partials[blockIdx.y * L::kTileCols + t] = total;
    // Publish this block's partials before counting it done: the block that sees the count reach
    // parts must find every part's row written.
    __threadfence();
    __syncthreads();
    if (t == 0) last_block = atomicAdd(&counters[blockIdx.x], 1u) == parts - 1;
    __syncthreads();
    if (!last_block) return;
    // Every other block of the tile has counted itself: reset for the next launch (or graph
    // replay) on this stream, which starts after this kernel completes.
    if (t == 0) counters[blockIdx.x] = 0;
    __threadfence();
    // Lane y adds parts y, y + kLanesY, ... in order. __ldcg reads L2, where the other blocks'
    // partials are, never a stale L1 line.
    float part_sum[VEC] = {};
    for (unsigned p = y; p < parts; p += L::kLanesY) {
      const float* at = tile_partials + p * L::kTileCols + x * VEC;
      if constexpr (VEC == 1) {
        part_sum[0] += __ldcg(at);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; i += 4) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(at + i));
          part_sum[i] += v.x;
          part_sum[i + 1] += v.y;
          part_sum[i + 2] += v.z;
          part_sum[i + 3] += v.w;
        }
      }
    }
    store_lane_sums<VEC>(lane_sums, part_sum);
    total = add_lanes<VEC>(lane_sums, group_sums);
  }
  if (t < L::kTileCols && tile_col + t < cols) out[tile_col + t] += total;
}

template <typename T, int VEC>
void launch_column_sums(const Tensor& matrix, float* out, cudaStream_t stream) {
  using L = ColumnSumLayout<VEC>;
  const int64_t rows = matrix.dim(0), cols = matrix.dim(1);
  // Parts depend on the shape only, so the sums (and their bits) do not depend on the GPU's size.
  const int64_t rows_per_part = std::max(kMinRowsPerPart, (rows + kMaxParts - 1) / kMaxParts);
  const int64_t parts = (rows + rows_per_part - 1) / rows_per_part;
  const int64_t tiles = (cols + L::kTileCols - 1) / L::kTileCols;
  const int64_t tiles_per_launch = std::min<int64_t>(tiles, kZeroedCounters);
  StreamResources& resources = stream_resources(stream);
  auto* partials = static_cast<float*>(resources.scratch(
      static_cast<size_t>(tiles_per_launch * parts * L::kTileCols) * sizeof(float)));
  unsigned* counters = resources.zeroed_counters();
  // More tiles than counters (over 131072 columns): launches in turn, each reusing the counters
  // and the partials after the previous one completed.
  for (int64_t first = 0; first < tiles; first += tiles_per_launch) {
    const dim3 grid(static_cast<unsigned>(std::min(tiles_per_launch, tiles - first)),
                    static_cast<unsigned>(parts));
    column_sums_kernel<T, VEC><<<grid, dim3(L::kLanesX, L::kLanesY), 0, stream>>>(
        static_cast<const T*>(matrix.data), rows, cols, rows_per_part, first, partials, counters,
        out);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

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
  dispatch_float_dtype(matrix.dtype, "accumulate_column_sums", "matrix", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = kPackWidth<T>;
    if (is_aligned16(matrix.data) && cols % kVec == 0)
      launch_column_sums<T, kVec>(matrix, out, stream);
    else
      launch_column_sums<T, 1>(matrix, out, stream);
  });
}

}  // namespace nmt::cuda
