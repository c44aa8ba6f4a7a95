// Traits of the long-sequence wgmma backward (backward_wgmma.cu): the cp.async ring (tiles in
// flight, stages), swizzled tile sizes, and warpgroups per block for each head_dim.
#pragma once

#include <cstddef>

#include "kernels/cuda/flash_attention/traits_mma.h"

namespace nmt::cuda::flash {

constexpr int kPrefetch = 2;  // tiles in flight ahead of the one in use
// cp.async stages of the streamed tiles: the last product of an iteration still runs while the
// copies of the tile after next are issued, so a stage is refilled two iterations after its use.
constexpr int kStages = kPrefetch + 2;
template <int D>
constexpr int kSwizzledTile = kTile* D;  // elements of a swizzled [64][D] tile (D / 64 blocks)

// Warpgroups per block: for D = 64 one, so that two independent blocks share an SM (their
// barriers do not hold each other up); for D = 128 two, sharing the streamed tiles (one block of
// one warpgroup per SM would leave the tensor cores idle while it waits).
template <int D>
constexpr int kGroupsFor = D == 64 ? 1 : 2;

template <typename T, int D>
constexpr size_t kTileBytes = kSwizzledTile<D> * sizeof(T);

}  // namespace nmt::cuda::flash
