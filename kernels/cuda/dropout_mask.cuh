// The dropout mask on the GPU, shared by the kernels that apply it (elementwise.cu, the fused
// backward tails of bias_grad_tails.cu, the LayerNorm kernels with a dropout tail of
// layernorm_forward.cu and layernorm_backward.cu): one Philox call per block of eight consecutive
// flat elements, element e in block e / 8, half e % 2 of word (e / 2) % 4, the draws of the CPU's
// dropout_keep (kernels/philox.h) bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cuda {

// The block of eight elements starting at 8 * block: dropout_uniform's call (kernels/philox.h).
__device__ __forceinline__ Philox4 dropout_block(const RngKey& key, uint64_t block) {
  return philox_block(key, block);
}

// Word `word` of a draw, by a select: an indexed array would go to local memory.
__device__ __forceinline__ uint32_t draw_word(const Philox4& draw, int word) {
  return word == 0 ? draw.v[0] : word == 1 ? draw.v[1] : word == 2 ? draw.v[2] : draw.v[3];
}

// The factors of the eight elements of `block` (one Philox call): keep_scale where the element is
// kept, 0 where it is dropped.
__device__ __forceinline__ void dropout_scales(const RngKey& key, int64_t block, float p,
                                               float keep_scale, float scales[8]) {
  const Philox4 draw = dropout_block(key, static_cast<uint64_t>(block));
#pragma unroll
  for (int j = 0; j < kDropoutBlockElements; ++j)
    scales[j] = dropout_half_uniform(draw.v[j / 2], j % 2) >= p ? keep_scale : 0.0f;
}

// Which of VEC consecutive flat elements from `first` dropout keeps: bit i of the result for
// element first + i, the test of dropout_scales. VEC == 1: any element; VEC == 4: first % 4 == 0
// (half a block); VEC a multiple of 8: first % 8 == 0, VEC / 8 whole blocks. A kernel holding a
// row in registers keeps one word for the mask of its elements instead of one float each. With
// VEC 8 from a multiple of 8 the result is byte first / 8 of the saved mask
// (dropout_keep_bits_words, kernels/philox.h), which the LayerNorm forward stores for its backward.
template <int VEC>
__device__ __forceinline__ uint32_t dropout_keep_bits(const RngKey& key, int64_t first, float p) {
  static_assert(VEC == 1 || VEC == 4 || (VEC % 8 == 0 && VEC <= 32),
                "one element, half a Philox block, or whole blocks");
  const auto kept = [p](uint32_t word, int half) { return dropout_half_uniform(word, half) >= p; };
  if constexpr (VEC == 1) {
    const Philox4 draw = dropout_block(key, static_cast<uint64_t>(first / 8));
    const int lane = static_cast<int>(first % 8);
    return kept(draw_word(draw, lane / 2), lane % 2) ? 1u : 0u;
  } else if constexpr (VEC == 4) {
    const Philox4 draw = dropout_block(key, static_cast<uint64_t>(first / 8));
    const bool high = first % 8 != 0;
    const uint32_t w0 = high ? draw.v[2] : draw.v[0], w1 = high ? draw.v[3] : draw.v[1];
    return (kept(w0, 0) ? 1u : 0u) | (kept(w0, 1) ? 2u : 0u) | (kept(w1, 0) ? 4u : 0u) |
           (kept(w1, 1) ? 8u : 0u);
  } else {
    uint32_t bits = 0;
#pragma unroll
    for (int b = 0; b < VEC / 8; ++b) {
      const Philox4 draw = dropout_block(key, static_cast<uint64_t>(first / 8 + b));
#pragma unroll
      for (int j = 0; j < 8; ++j) bits |= (kept(draw.v[j / 2], j % 2) ? 1u : 0u) << (8 * b + j);
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
