// The dropout mask on the GPU, shared by the kernels that apply it (elementwise.cu, the fused
// backward tails of bias_grad_tails.cu): one Philox call per block of four consecutive flat
// elements, element e in block e / 4 at lane e % 4, the draws of the CPU's dropout_keep
// (kernels/philox.h) bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cuda {

// The same counter and key words as rng_uniform(key, element) in kernels/philox.h, for the block
// of four elements starting at 4 * block.
__device__ __forceinline__ Philox4 dropout_block(const RngKey& key, uint64_t block) {
  return philox4x32(static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                    key.tensor_id ^ static_cast<uint32_t>(key.step >> 32) * 0x9E3779B9u,
                    static_cast<uint32_t>(key.step), static_cast<uint32_t>(key.seed),
                    static_cast<uint32_t>(key.seed >> 32));
}

// The factors of the four elements of `block` (one Philox call): keep_scale where the element is
// kept, 0 where it is dropped.
__device__ __forceinline__ void dropout_scales(const RngKey& key, int64_t block, float p,
                                               float keep_scale, float scales[4]) {
  const Philox4 draw = dropout_block(key, static_cast<uint64_t>(block));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float uniform = static_cast<float>(draw.v[j] >> 8) * (1.0f / 16777216.0f);
    scales[j] = uniform >= p ? keep_scale : 0.0f;
  }
}

}  // namespace nmt::cuda
