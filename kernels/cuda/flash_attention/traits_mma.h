// Tile traits of the mma.sync kernels (forward.cu, backward.cu, backward_dq.cu,
// backward_short.cu), which the wgmma variants build on: 128 threads (4 warps of 16 rows) per
// 64-row tile, padded shared-memory rows, the dropout keep mask's row stride.
#pragma once

#include <cstdint>

namespace nmt::cuda::flash {

constexpr int kThreads = 128;  // 4 warps, each owning 16 rows of a tile
constexpr int kTile = 64;      // query rows and key rows per tile
// Shared-memory rows are padded by 16 bytes so the 8 row addresses of one ldmatrix fall in
// different banks (an unpadded 128- or 256-byte row puts them all in one).
constexpr int kPad = 8;
constexpr int kMaskStride = 72;  // bytes per row of the dropout keep mask (also bank-skewed)
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int kRowStride = D + kPad;
template <int D>
constexpr int kTileElements = kTile* kRowStride<D>;

// A warpgroup (the wgmma variants' unit) is one mma.sync block of threads.
constexpr int kGroupThreads = 128;  // 4 warps of 16 rows, 64 rows of a product
static_assert(kGroupThreads == kThreads,
              "a warpgroup fills a dropout tile as fill_dropout_tile's block");

// backward.cu: warps per block of the delta = rowsum(d_out * out) kernel, one per (query, head).
constexpr int kDeltaWarps = 8;

// backward_short.cu: tiles staged per (sentence, head) item.
constexpr int kOperands = 5;  // staged per item: k, v, q, d_out, out

}  // namespace nmt::cuda::flash
