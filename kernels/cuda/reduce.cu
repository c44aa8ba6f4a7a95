// Deterministic column sums. accumulate_column_sums: one launch over (column tiles, row parts)
// whose last block per tile adds the parts in order; accumulate_partial_sum_pair / _triple: an
// ordered sum of parts that another kernel wrote (LayerNorm's parameter gradients and the bias
// gradient of its dropout tail; the short-sentence attention backward's q, k, v bias gradients).
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"

namespace nmt::cuda {
namespace {

// Block (kCols columns) x (kLanes part lanes): lane y sums parts y, y + kLanes, ... (kPartUnroll
// loads in flight, added in part order); then row y = 0 adds the kLanes lane sums in order. Every
// run adds the same numbers in the same order, and a column's sum depends on that column's
// partials alone (not on how many outputs share the partial rows, nor on kCols). partials:
// [parts, outputs * cols], hundreds of rows (one per block of LayerNorm's grid, or one per
// sentence of the attention's) just written, read from L2; column o * cols + c goes to output o
// (first, second, third) at c. Eight columns a block (32-byte sectors) spread the reads over 2 * d
// / 8 blocks, where 32 columns left a [2, 512] pair on 32 multiprocessors, each pulling 1/32 of the
// partials from L2.
constexpr int kCols = 8, kLanes = 32, kPartUnroll = 8;

struct PartialSumOutputs {
  float *first, *second, *third;
};

// The block's kCols columns of one second pass (the kernels below: one pass, or one of several).
__device__ __forceinline__ void sum_partials_block(const float* __restrict__ partials,
                                                   int64_t parts, int64_t cols, int outputs,
                                                   PartialSumOutputs outs) {
  __shared__ float lane_sums[kLanes][kCols + 1];
  const int64_t width = outputs * cols;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + threadIdx.x;
  float sum = 0.0f;
  if (col < width) {
    int64_t p = threadIdx.y;
    for (; p + (kPartUnroll - 1) * kLanes < parts; p += kPartUnroll * kLanes) {
      float v[kPartUnroll];
#pragma unroll
      for (int u = 0; u < kPartUnroll; ++u) v[u] = partials[(p + u * kLanes) * width + col];
#pragma unroll
      for (int u = 0; u < kPartUnroll; ++u) sum += v[u];
    }
    for (; p < parts; p += kLanes) sum += partials[p * width + col];
  }
  lane_sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < width) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kLanes; ++j) total += lane_sums[j][threadIdx.x];
    // A null output (a bias gradient the caller did not ask for) takes nothing.
    const int o = static_cast<int>(col / cols);
    float* out = o == 0 ? outs.first : (o == 1 ? outs.second : outs.third);
    if (out != nullptr) out[col - o * cols] += total;
  }
}

__global__ void __launch_bounds__(kCols* kLanes)
    accumulate_partial_sums_kernel(const float* __restrict__ partials, int64_t parts, int64_t cols,
                                   int outputs, PartialSumOutputs outs) {
  sum_partials_block(partials, parts, cols, outputs, outs);
}

// Several deferred passes in one launch, passed by value (kernel parameter space; __grid_constant__
// so that indexing it by blockIdx reads the parameter in place instead of copying the whole batch
// to each thread's local memory): grid.y picks the pass, grid.x its column blocks (the widest
// pass's; a narrower pass's extra blocks return).
constexpr int kMaxDeferredPerLaunch = 64;
struct DeferredBatch {
  DeferredPartialSum sums[kMaxDeferredPerLaunch];
};
static_assert(sizeof(DeferredBatch) <= 4096, "the batch fits the classic kernel parameter space");

__global__ void __launch_bounds__(kCols* kLanes)
    accumulate_deferred_kernel(const __grid_constant__ DeferredBatch batch) {
  const DeferredPartialSum& s = batch.sums[blockIdx.y];
  if (static_cast<int64_t>(blockIdx.x) * kCols >= s.outputs * s.cols) return;  // the whole block
  sum_partials_block(s.partials, s.parts, s.cols, s.outputs, {s.out[0], s.out[1], s.out[2]});
}

void accumulate_partial_sums(const float* partials, int64_t parts, int64_t cols,
                             PartialSumOutputs outs, int outputs, cudaStream_t stream) {
  if (cols == 0 || parts == 0) return;
  accumulate_partial_sums_kernel<<<blocks_for(outputs * cols, kCols), dim3(kCols, kLanes), 0,
                                   stream>>>(partials, parts, cols, outputs, outs);
  CUDA_CHECK_LAUNCH();
}

// ---- accumulate_column_sums ----
//
// The grid, the block layout and the ordered reduction of column_sums.cuh: each thread adds its
// rows of the part, kRowUnroll loads in flight at a time, in row order.

template <typename T, int VEC>
__device__ __forceinline__ void add_row(const T* __restrict__ at, float (&acc)[VEC]) {
  const Pack<T, VEC> v = *reinterpret_cast<const Pack<T, VEC>*>(at);
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] += to_float(v.v[i]);
}

// matrix: [rows, cols] T, 16-byte aligned with cols % VEC == 0 where VEC > 1. partials: [tiles,
// parts, kTileCols] f32 (tiles = gridDim.x; gridDim.y blocks of parts_per_block parts a tile).
// counters: [tiles], zero on entry and on exit. out: [cols] f32, += the column sums. The grid
// covers tiles first_tile, first_tile + 1, ... (more tiles than counters take several launches).
template <typename T, int VEC>
__global__ void __launch_bounds__(column_sums::kThreads)
    column_sums_kernel(const T* __restrict__ matrix, int64_t rows, int64_t cols,
                       int64_t rows_per_part, int64_t parts, int64_t parts_per_block,
                       int64_t first_tile, float* __restrict__ partials,
                       unsigned* __restrict__ counters, float* __restrict__ out) {
  using L = column_sums::Layout<VEC>;
  constexpr int kRowUnroll = column_sums::kRowUnroll;
  extern __shared__ float4 column_sums_slots[];  // column_sums::slot_bytes<VEC>(parts_per_block)
  const column_sums::TileShared<VEC> shared{reinterpret_cast<float*>(column_sums_slots)};
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t tile_col = (first_tile + blockIdx.x) * L::kTileCols;
  const int64_t col = tile_col + x * VEC;  // the first of this thread's VEC columns
  const int64_t first_part = blockIdx.y * parts_per_block;
  const int64_t end_part = min(parts, first_part + parts_per_block);
  for (int64_t part = first_part; part < end_part; ++part) {
    float acc[VEC] = {};
    if (col < cols) {  // with VEC > 1, cols % VEC == 0: all VEC columns are in range, or none
      const int64_t end = min(rows, (part + 1) * rows_per_part);
      int64_t r = part * rows_per_part + y;
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
    column_sums::store_slot_sums<VEC>(shared, static_cast<int>(part - first_part), acc);
  }
  column_sums::store_block_parts<VEC>(shared, first_part, static_cast<int>(end_part - first_part),
                                      parts, tile_col, cols, partials, out);
  column_sums::finish_tile<VEC>(shared, parts, tile_col, cols, partials, counters, out);
}

template <typename T, int VEC>
void launch_column_sums(const Tensor& matrix, float* out, cudaStream_t stream) {
  using L = column_sums::Layout<VEC>;
  const int64_t rows = matrix.dim(0), cols = matrix.dim(1);
  const column_sums::Grid grid = column_sums::plan_grid(rows, cols, L::kTileCols, stream);
  for (int64_t first = 0; first < grid.tiles; first += grid.tiles_per_launch) {
    column_sums_kernel<T, VEC><<<grid.launch_grid(first), dim3(L::kLanesX, L::kLanesY),
                                 column_sums::slot_bytes<VEC>(grid.parts_per_block), stream>>>(
        static_cast<const T*>(matrix.data), rows, cols, grid.rows_per_part, grid.parts,
        grid.parts_per_block, first, grid.partials, grid.counters, out);
    CUDA_CHECK_LAUNCH();
  }
}

thread_local PartialSumDeferral* active_deferral = nullptr;

}  // namespace

float* PartialSumDeferral::take(int64_t floats) {
  // 16-byte steps, so every taken buffer keeps the alignment the partials' stores may want.
  const int64_t rounded = (floats + 3) / 4 * 4;
  if (buffer_ == nullptr || floats <= 0 || used_ + rounded > floats_) return nullptr;
  float* at = buffer_ + used_;
  used_ += rounded;
  return at;
}

void PartialSumDeferral::flush(cudaStream_t stream) {
  int64_t widest = 0;
  for (const DeferredPartialSum& s : recorded_) widest = std::max(widest, s.outputs * s.cols);
  for (size_t first = 0; first < recorded_.size(); first += kMaxDeferredPerLaunch) {
    const size_t count = std::min<size_t>(kMaxDeferredPerLaunch, recorded_.size() - first);
    DeferredBatch batch{};
    for (size_t i = 0; i < count; ++i) batch.sums[i] = recorded_[first + i];
    const dim3 grid(blocks_for(widest, kCols), static_cast<unsigned>(count));
    accumulate_deferred_kernel<<<grid, dim3(kCols, kLanes), 0, stream>>>(batch);
    CUDA_CHECK_LAUNCH();
  }
  last_flushed_ = recorded();
  clear();
}

void PartialSumDeferral::clear() {
  recorded_.clear();
  used_ = 0;
}

PartialSumPass::PartialSumPass(int64_t parts, int64_t cols, int outputs, cudaStream_t stream)
    : deferral_(active_partial_sum_deferral()),
      partials_(nullptr),
      parts_(parts),
      cols_(cols),
      outputs_(outputs),
      stream_(stream) {
  const int64_t floats = parts * outputs * cols;
  if (deferral_ != nullptr) partials_ = deferral_->take(floats);
  if (partials_ == nullptr) {
    deferral_ = nullptr;
    partials_ = static_cast<float*>(
        stream_resources(stream).scratch(static_cast<size_t>(floats) * sizeof(float)));
  }
}

void PartialSumPass::finish(float* first, float* second, float* third) {
  if (deferral_ != nullptr)
    deferral_->record({partials_, parts_, cols_, outputs_, {first, second, third}});
  else
    accumulate_partial_sums(partials_, parts_, cols_, {first, second, third}, outputs_, stream_);
}

PartialSumDeferral* active_partial_sum_deferral() {
  return active_deferral;
}

DeferPartialSums::DeferPartialSums(PartialSumDeferral* deferral) : previous_(active_deferral) {
  active_deferral = deferral;
}

DeferPartialSums::~DeferPartialSums() {
  active_deferral = previous_;
}

void accumulate_partial_sum_pair(const float* partials, int64_t parts, int64_t cols, float* first,
                                 float* second, cudaStream_t stream) {
  accumulate_partial_sums(partials, parts, cols, {first, second, nullptr}, 2, stream);
}

void accumulate_partial_sum_triple(const float* partials, int64_t parts, int64_t cols, float* first,
                                   float* second, float* third, cudaStream_t stream) {
  accumulate_partial_sums(partials, parts, cols, {first, second, third}, 3, stream);
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
