// Traits of the long-sequence wgmma forward (forward_wgmma.cu): two warpgroups per 128-query
// block, 128-byte swizzled [64][64] blocks, the descriptor steps and the shared-memory plan of a
// kStages-deep K/V ring.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/flash_attention/traits_mma.h"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {

constexpr int kWarpgroups = 2;                              // per block
constexpr int kBlockThreads = kWarpgroups * kGroupThreads;  // 256
constexpr int kBlockQueries = kWarpgroups * kTile;          // 128
constexpr uint32_t kBlockBytes = wgmma::kBlockBytes;        // one swizzled [64][64] block
constexpr uint32_t kRowBytes = 128;                         // one row of a block
// Matrix descriptors hold shared addresses in 16-byte units in their low bits (no carry out of
// them: shared memory stays below 256 KB), so operands are reached by adding these steps.
constexpr uint64_t kDescBlock = kBlockBytes >> 4;         // the next 64 columns
constexpr uint64_t kDescKStep = 32 >> 4;                  // k16 step along a row (K-major)
constexpr uint64_t kDescRowStep = (16 * kRowBytes) >> 4;  // k16 step down the rows (MN-major)

// Shared-memory plan (byte offsets from a 1024-byte aligned base): Q ([64][D] per warpgroup),
// kStages K tiles and kStages V tiles of [64][D], then (with dropout) two keep masks of
// kBlockQueries rows. K/V tile t lives in stage t % kStages and is loaded kStages - 2 tiles ahead:
// its stage last held tile t - 2, whose products finished before the barrier that precedes the
// load (iteration j still reads K of tile j and V of tile j - 1).
template <int D, int kStages>
struct Plan {
  static_assert(kStages >= 3, "P V of tile j - 1 still reads its stage during iteration j");
  static constexpr int kDBlocks = D / wgmma::kBlockCols;
  static constexpr int kPrefetch = kStages - 2;
  static constexpr uint32_t kTileBytes = kDBlocks * kBlockBytes;
  static constexpr uint32_t kKOffset = kWarpgroups * kTileBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr uint32_t kKeepOffset = kVOffset + kStages * kTileBytes;
  static constexpr uint32_t kKeepBytes = kBlockQueries * kMaskStride;
  // + 1024: the dynamic shared memory base is rounded up to the swizzle's 1024-byte alignment.
  static constexpr size_t smem_bytes(bool dropout) {
    return 1024 + kKeepOffset + (dropout ? 2 * kKeepBytes : 0);
  }
  // A tile copy: the block's threads each move kPasses 16-byte chunks, kRowsPerPass rows apart.
  static constexpr int kChunksPerRow = D / 8;
  static constexpr int kRowsPerPass = kBlockThreads / kChunksPerRow;
  static constexpr int kPasses = kTile / kRowsPerPass;
  static_assert(kRowsPerPass % 8 == 0, "every pass keeps the row's swizzle phase");
};

}  // namespace nmt::cuda::flash
