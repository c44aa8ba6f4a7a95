// The dropout mask on the GPU, shared by the kernels that apply it (elementwise.cu, the fused
// backward tails of bias_grad_tails.cu, the LayerNorm kernels with a dropout tail of
// layernorm_forward.cu and layernorm_backward.cu): one Philox call per block of four consecutive
// flat elements, element e in block e / 4 at lane e % 4, the draws of the CPU's dropout_keep
// (kernels/philox.h) bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cuda {

// The block of four elements starting at 4 * block: rng_uniform's call (kernels/philox.h).
__device__ __forceinline__ Philox4 dropout_block(const RngKey& key, uint64_t block) {
  return philox_block(key, block);
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

// Which of VEC consecutive flat elements from `first` dropout keeps: bit i of the result for
// element first + i, the test of dropout_scales. VEC == 1: any element (its lane of its block);
// VEC a multiple of 4: first % 4 == 0, VEC / 4 whole blocks. A kernel holding a row in registers
// keeps one word for the mask of its elements instead of one float each. With VEC 8 from a
// multiple of 8 the result is byte first / 8 of the saved mask (dropout_keep_bits_words,
// kernels/philox.h), which the LayerNorm forward stores for its backward.
template <int VEC>
__device__ __forceinline__ uint32_t dropout_keep_bits(const RngKey& key, int64_t first, float p) {
  static_assert(VEC == 1 || (VEC % 4 == 0 && VEC <= 32), "whole Philox blocks, or one element");
  const auto kept = [p](uint32_t word) {
    return static_cast<float>(word >> 8) * (1.0f / 16777216.0f) >= p;
  };
  if constexpr (VEC == 1) {
    const Philox4 draw = dropout_block(key, static_cast<uint64_t>(first / 4));
    // A select, not an indexed array, keeps the four words in registers.
    const int lane = static_cast<int>(first % 4);
    const uint32_t word = lane == 0   ? draw.v[0]
                          : lane == 1 ? draw.v[1]
                          : lane == 2 ? draw.v[2]
                                      : draw.v[3];
    return kept(word) ? 1u : 0u;
  } else {
    uint32_t bits = 0;
#pragma unroll
    for (int b = 0; b < VEC / 4; ++b) {
      const Philox4 draw = dropout_block(key, static_cast<uint64_t>(first / 4 + b));
#pragma unroll
      for (int j = 0; j < 4; ++j) bits |= (kept(draw.v[j]) ? 1u : 0u) << (4 * b + j);
    }
    return bits;
  }
}

// The factor of element i of a mask from dropout_keep_bits: keep_scale where kept, 0 where
// dropped (a product with 0, not a stored 0, as dropout_kernel computes it: -x gives -0).
__device__ __forceinline__ float dropout_bit_scale(uint32_t bits, int i, float keep_scale) {
  return (bits >> i) & 1u ? keep_scale : 0.0f;
}

}  // namespace nmt::cuda
