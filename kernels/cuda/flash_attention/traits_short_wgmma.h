// Traits of the short-sentence wgmma kernels (short_wgmma.cu): one warpgroup per block, one
// [64][D] operand tile of D / 64 swizzled blocks per operand.
#pragma once

#include "kernels/cuda/flash_attention/traits_mma.h"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {

// One [64][D] operand tile: D / 64 swizzled blocks.
template <int D>
constexpr int kOperandBytes = D / 64 * wgmma::kBlockBytes;

// The backward's bias-gradient column sums: of dQ, dK and dV, 64 columns each per item.
constexpr int kBiasOperands = 3;

}  // namespace nmt::cuda::flash
