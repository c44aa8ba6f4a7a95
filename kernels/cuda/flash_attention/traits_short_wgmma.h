// Traits of the short-sentence wgmma kernels (short_wgmma.cu): one warpgroup per block, one
// [64][D] operand tile of D / 64 swizzled blocks per operand.
#pragma once

#include "kernels/cuda/flash_attention/traits_mma.h"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {

// One [64][D] operand tile: D / 64 swizzled blocks.
template <int D>
constexpr int kOperandBytes = D / 64 * wgmma::kBlockBytes;

}  // namespace nmt::cuda::flash
