// The deterministic column sums' shared pieces (reduce.cu's accumulate_column_sums, and the kernels
// that sum the columns of what they write, bias_grad_tails.cu): the block layout, the fixed-order
// reduction of a block's lanes, the last block per tile that adds the row parts in order, and the
// host-side grid. A kernel that adds each row into its thread's sums in row order, as
// column_sums_kernel does, keeping each part's sums with store_slot_sums, ending its parts with
// store_block_parts and the block with finish_tile, gets the bits of accumulate_column_sums.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda::column_sums {

// grid (column tiles, blocks of Grid::parts_per_block row parts), block (kLanesX, kLanesY) =
// kThreads. For each of its parts, thread (x, y) owns VEC adjacent columns of the tile (one
// 16-byte load per row where VEC > 1) and sums rows y, y + kLanesY, ... of the part in row order;
// the block adds its kLanesY lanes in a fixed tree and writes one f32 partial row of the part
// (store_block_parts, after the block's last part). The block that finishes a tile last (an atomic
// counter per tile, finish_tile) adds the parts in a fixed order into out. Which block comes last
// varies from run to run; what it adds, and in which order, does not.
constexpr int kThreads = 256;
// Rows per part at least (4 unrolled loads for each of the vector path's 32 lanes) and parts at
// most: the partials cost 8 bytes per part and column against 2 per row and column of a bf16
// input, about 3% here, and the last block's ordered sum stays short.
constexpr int64_t kMinRowsPerPart = 128;
constexpr int64_t kMaxParts = 256;
// Rows whose loads a thread issues before it adds any of them.
constexpr int kRowUnroll = 4;

template <int VEC>
struct Layout {
  // 8 lanes of 16 bytes read 128 contiguous bytes of a row; the scalar path reads 32 elements.
  static constexpr int kLanesX = VEC == 1 ? 32 : 8;
  static constexpr int kLanesY = kThreads / kLanesX;
  static constexpr int kTileCols = kLanesX * VEC;
  // The lane sums are added in groups of VEC lanes (kGroups groups per column), then the groups.
  static constexpr int kGroups = kThreads / kTileCols;
  static_assert(kGroups * VEC == kLanesY, "each group adds VEC consecutive lanes");
};

// Thread (x, y)'s VEC sums into lane_sums [kLanesY][kTileCols] at row y, columns x * VEC...:
// 16-byte stores where VEC > 1 (fewer instructions and bank conflicts than one float at a time).
template <int VEC>
__device__ __forceinline__ void store_lane_sums(float* lane_sums, const float (&sums)[VEC]) {
  using L = Layout<VEC>;
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

// A block's ordered sums in its dynamic shared memory (slot_bytes, given at launch): a slot of lane
// sums [kLanesY][kTileCols] and of group sums [kGroups][kTileCols] f32 for each part the block sums
// (9 KiB a slot for 16-bit packs), sized to the grid's parts_per_block so a block of one part holds
// no more than it uses.
template <int VEC>
struct TileShared {
  static constexpr int kLaneFloats = Layout<VEC>::kLanesY * Layout<VEC>::kTileCols;
  static constexpr int kSlotFloats = kLaneFloats + Layout<VEC>::kGroups * Layout<VEC>::kTileCols;
  static_assert(kSlotFloats % 4 == 0 && kLaneFloats % 4 == 0, "slots of whole float4s");
  float* base;
  __device__ float* lane_sums(int slot) const { return base + slot * kSlotFloats; }
  __device__ float* group_sums(int slot) const { return base + slot * kSlotFloats + kLaneFloats; }
};

// The dynamic shared memory of a block of parts_per_block parts (TileShared).
template <int VEC>
constexpr size_t slot_bytes(int64_t parts_per_block) {
  return static_cast<size_t>(parts_per_block) * TileShared<VEC>::kSlotFloats * sizeof(float);
}

// Keeps one row part's sums of a block of the grid above: `sums` are this thread's column sums over
// its rows of the block's slot-th part (every thread calls, with zeros where it had no columns).
// No barrier: the block adds its slots once, after its last part (store_block_parts), so its warps
// go on to the next part's loads without waiting for each other.
template <int VEC>
__device__ __forceinline__ void store_slot_sums(const TileShared<VEC>& shared, int slot,
                                                const float (&sums)[VEC]) {
  store_lane_sums<VEC>(shared.lane_sums(slot), sums);
}

// Adds the lanes of slots 0 .. slots - 1 (each filled by every thread before the call): for each
// slot and column t of the tile, lanes g * VEC .. g * VEC + VEC - 1 in order for each group g, then
// the groups in order, and hands thread t < kTileCols each slot's total, emit(slot, total). Two
// barriers for all the slots; the first orders the callers' lane sums before the reads.
template <int VEC, typename Emit>
__device__ __forceinline__ void add_slot_lanes(const TileShared<VEC>& shared, int slots,
                                               Emit&& emit) {
  using L = Layout<VEC>;
  const int t = threadIdx.y * L::kLanesX + threadIdx.x;
  const int col = t % L::kTileCols, group = t / L::kTileCols;
  __syncthreads();
  for (int s = 0; s < slots; ++s) {
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      sum += shared.lane_sums(s)[(group * VEC + j) * L::kTileCols + col];
    shared.group_sums(s)[group * L::kTileCols + col] = sum;
  }
  __syncthreads();
  if (t >= L::kTileCols) return;
  for (int s = 0; s < slots; ++s) {
    float total = 0.0f;
#pragma unroll
    for (int g = 0; g < L::kGroups; ++g) total += shared.group_sums(s)[g * L::kTileCols + col];
    emit(s, total);
  }
}

// Ends the block's row parts first_part .. first_part + slots - 1 (slots <= kMaxPartsPerBlock, each
// kept by store_slot_sums): adds each part's lanes (add_slot_lanes: the same bits as a part at a
// time) and, with one part in the grid, adds the tile's sums into out [cols] f32 directly; else
// writes each part's row of partials [tiles, parts, kTileCols] f32 (tiles = gridDim.x), for
// finish_tile. Columns [tile_col, tile_col + kTileCols) are the block's tile.
template <int VEC>
__device__ __forceinline__ void store_block_parts(const TileShared<VEC>& shared, int64_t first_part,
                                                  int slots, int64_t parts, int64_t tile_col,
                                                  int64_t cols, float* __restrict__ partials,
                                                  float* __restrict__ out) {
  using L = Layout<VEC>;
  const int t = threadIdx.y * L::kLanesX + threadIdx.x;
  add_slot_lanes<VEC>(shared, slots, [&](int s, float total) {
    if (parts == 1) {
      if (tile_col + t < cols) out[tile_col + t] += total;
    } else {
      partials[(static_cast<int64_t>(blockIdx.x) * parts + first_part + s) * L::kTileCols + t] =
          total;
    }
  });
}

// Ends a block after its parts (store_block_parts): the block that counts itself last for its tile
// (counters: [tiles], zero on entry and on exit; gridDim.y blocks a tile) adds all parts of the
// tile in order into out. Nothing to do with one part.
template <int VEC>
__device__ __forceinline__ void finish_tile(const TileShared<VEC>& shared, int64_t parts,
                                            int64_t tile_col, int64_t cols,
                                            const float* __restrict__ partials,
                                            unsigned* __restrict__ counters,
                                            float* __restrict__ out) {
  using L = Layout<VEC>;
  if (parts == 1) return;
  const int x = threadIdx.x, y = threadIdx.y, t = y * L::kLanesX + x;
  // Publish this block's partials before counting it done: the block that sees the count reach
  // gridDim.y must find every part's row written.
  __threadfence();
  __syncthreads();
  __shared__ bool last_block;
  if (t == 0) last_block = atomicAdd(&counters[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last_block) return;
  // Every other block of the tile has counted itself: reset for the next launch (or graph replay)
  // on this stream, which starts after this kernel completes.
  if (t == 0) counters[blockIdx.x] = 0;
  __threadfence();
  // Lane y adds parts y, y + kLanesY, ... in order. __ldcg reads L2, where the other blocks'
  // partials are, never a stale L1 line.
  const float* tile_partials = partials + static_cast<int64_t>(blockIdx.x) * parts * L::kTileCols;
  float part_sum[VEC] = {};
  for (int64_t p = y; p < parts; p += L::kLanesY) {
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
  store_lane_sums<VEC>(shared.lane_sums(0), part_sum);
  add_slot_lanes<VEC>(shared, 1, [&](int, float total) {
    if (tile_col + t < cols) out[tile_col + t] += total;
  });
}

// The grid of one call over a [rows, cols] matrix with tiles of tile_cols columns, and the stream
// memory its kernels use. Parts depend on the shape only, so the sums (and their bits) do not
// depend on the GPU's size. A block sums parts_per_block consecutive parts of its tile, one after
// another, each into its own row of partials (the same rows a block per part would write), so
// the bits do not depend on parts_per_block either: it only trades blocks for work per block. The
// end of a block (the ordered lane sums, the fence, the counter) costs about as much as a part of
// 128 rows takes to load, so where the grid has blocks to spare, blocks take 2 or 4 parts; their
// lane sums wait in shared memory until the last part (one end for all of them: the warps of a
// block do not wait for each other between parts, and another part's loads overlap the sums).
// More tiles than counters (over 4096 tiles) take launches in turn, each covering
// tiles_per_launch tiles from its first_tile and reusing the counters and the partials after the
// previous one completed.
struct Grid {
  int64_t rows_per_part, parts, parts_per_block, tiles, tiles_per_launch;
  float* partials;     // [tiles_per_launch, parts, tile_cols] f32, the stream's scratch
  unsigned* counters;  // [tiles_per_launch], the stream's zeroed counters

  int64_t blocks_per_tile() const { return (parts + parts_per_block - 1) / parts_per_block; }
  dim3 launch_grid(int64_t first_tile) const {
    return dim3(static_cast<unsigned>(std::min(tiles_per_launch, tiles - first_tile)),
                static_cast<unsigned>(blocks_per_tile()));
  }
};

// Parts a block sums at most (Grid::parts_per_block): each has its own slot of lane sums, so the
// block adds them all after its last part, with one set of barriers.
constexpr int64_t kMaxPartsPerBlock = 4;

// Blocks per multiprocessor a grid keeps at least before its blocks take several parts each
// (NMT_COLUMN_SUMS_BLOCKS_PER_SM=N in the environment overrides it, for bench-kernels; 0 keeps a
// block per part).
constexpr int64_t kMinBlocksPerSm = 2;

inline int64_t min_blocks_per_sm() {
  static const int64_t value = [] {
    const char* text = std::getenv("NMT_COLUMN_SUMS_BLOCKS_PER_SM");
    return text != nullptr && *text != 0 ? std::max<int64_t>(0, std::atoll(text)) : kMinBlocksPerSm;
  }();
  return value;
}

inline Grid plan_grid(int64_t rows, int64_t cols, int tile_cols, cudaStream_t stream) {
  Grid g;
  g.rows_per_part = std::max(kMinRowsPerPart, (rows + kMaxParts - 1) / kMaxParts);
  g.parts = (rows + g.rows_per_part - 1) / g.rows_per_part;
  g.tiles = (cols + tile_cols - 1) / tile_cols;
  g.tiles_per_launch = std::min<int64_t>(g.tiles, kZeroedCounters);
  const int64_t per_sm = min_blocks_per_sm();
  const int64_t enough = per_sm * multiprocessor_count();
  g.parts_per_block = 1;
  while (per_sm > 0 && g.parts_per_block < kMaxPartsPerBlock &&
         g.tiles_per_launch * ((g.parts + 2 * g.parts_per_block - 1) / (2 * g.parts_per_block)) >=
             enough)
    g.parts_per_block *= 2;
  StreamResources& resources = stream_resources(stream);
  g.partials = static_cast<float*>(resources.scratch(
      static_cast<size_t>(g.tiles_per_launch * g.parts * tile_cols) * sizeof(float)));
  g.counters = resources.zeroed_counters();
  return g;
}

}  // namespace nmt::cuda::column_sums
