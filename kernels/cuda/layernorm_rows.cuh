// What the LayerNorm forward (layernorm_forward.cu) and backward (layernorm_backward.cu) files
// share: the block shapes and the choice between the register path (one warp per row, the row in
// registers) and the generic path (one block per row through global memory). The fused ops with a
// dropout tail take the variant their unfused LayerNorm would take for the same tensors, so that
// the reductions run in the same order and the results are the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/op_checks.h"
#include "kernels/tensor.h"

namespace nmt::cuda::layernorm_rows {

constexpr int kWarpsPerBlock = 8;
constexpr int kRowThreads = kWarpsPerBlock * 32;
constexpr int kGenericThreads = 256;

// Register path: lane l owns CHUNKS packs of VEC columns, pack c at (c * 32 + l) * VEC.
// Picks the variant for width d and calls f(VEC, CHUNKS) with them as std::integral_constant. A
// lane holds at most 32 elements of a row (more spills registers in the backward kernel). Returns
// false when d needs the generic path. `aligned`: every [rows, d] and [d] tensor the unfused
// LayerNorm reads or writes is 16-byte aligned.
template <typename T, typename F>
bool with_row_variant(int64_t d, bool aligned, F&& f) {
  constexpr int vec = kPackWidth<T>;
  using One = std::integral_constant<int, 1>;
  using Vec = std::integral_constant<int, vec>;
  if (aligned && d % vec == 0) {
    const int64_t packs = d / vec;
    if (packs <= 32) return f(Vec{}, One{}), true;
    if (packs <= 64) return f(Vec{}, std::integral_constant<int, 2>{}), true;
    if (packs <= 128) return f(Vec{}, std::integral_constant<int, 4>{}), true;
    if constexpr (vec * 8 <= 32) {
      if (packs <= 256) return f(Vec{}, std::integral_constant<int, 8>{}), true;
    }
  }
  if (d <= 64) return f(One{}, std::integral_constant<int, 2>{}), true;
  if (d <= 256) return f(One{}, std::integral_constant<int, 8>{}), true;
  return false;
}

// x: [rows, d]; gamma: [d] of x's dtype.
inline void check_common(const char* op, const Tensor& x, const Tensor& gamma) {
  detail::require_rank(op, "x", x, 2);
  const int64_t d = x.dim(1);
  check_shape(op, "gamma", gamma, {d});
  detail::require_same_dtype(op, "gamma", gamma, "x", x);
}

}  // namespace nmt::cuda::layernorm_rows
