// Host-side helpers of the fused attention kernels: the supported-configuration check, launch
// parameters from the public operands, 16-byte alignment tests and the (dtype, head_dim) switch
// that turns runtime values into template arguments. Included by kernels/cuda/flash_attention/*.cu.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/flash_attention.h"

namespace nmt::cuda::flash {

inline void require_supported(const char* op, DType dtype, const AttentionShape& shape) {
  if (!fused_attention_supported(dtype, shape.head_dim))
    throw std::invalid_argument(std::string(op) + ": the CUDA kernel takes bf16 or f16 with " +
                                "head_dim 64 or 128, got " + dtype_name(dtype) + " head_dim " +
                                std::to_string(shape.head_dim));
  if (shape.q_len > INT_MAX / 2 || shape.kv_len > INT_MAX / 2 ||
      shape.batch * shape.heads > INT_MAX || (shape.q_len + kTile - 1) / kTile > 65535)
    throw std::invalid_argument(std::string(op) + ": AttentionShape too large for the CUDA kernel");
}

// Whether the element at column `col` of a row-major matrix with `stride` elements per row starts
// a 16-byte aligned access in every row.
inline bool aligned16(const void* data, int64_t stride, int64_t col, DType dtype) {
  const size_t es = dtype_size(dtype);
  return (reinterpret_cast<uintptr_t>(data) + static_cast<size_t>(col) * es) % 16 == 0 &&
         (static_cast<size_t>(stride) * es) % 16 == 0;
}

inline const void* column(const Tensor& t, int64_t col) {
  return static_cast<const char*>(t.data) + static_cast<size_t>(col) * dtype_size(t.dtype);
}

// The parameters every kernel reads: q, k, v, lengths, the shape, dropout and the scales.
inline Params make_params(const AttentionOperands& in, const Tensor& kv_lengths,
                          const AttentionShape& shape, float dropout_p, const RngKey& key) {
  Params p{};
  p.q = column(in.q, in.q_col);
  p.k = column(in.k, in.k_col);
  p.v = column(in.v, in.v_col);
  p.q_stride = in.q.dim(1);
  p.k_stride = in.k.dim(1);
  p.v_stride = in.v.dim(1);
  p.kv_lengths = static_cast<const int32_t*>(kv_lengths.data);
  p.batch = static_cast<int>(shape.batch);
  p.heads = static_cast<int>(shape.heads);
  p.q_len = static_cast<int>(shape.q_len);
  p.kv_len = static_cast<int>(shape.kv_len);
  p.causal = shape.causal;
  p.pack = 1;
  p.vector_io = aligned16(in.q.data, in.q.dim(1), in.q_col, in.q.dtype) &&
                aligned16(in.k.data, in.k.dim(1), in.k_col, in.k.dtype) &&
                aligned16(in.v.data, in.v.dim(1), in.v_col, in.v.dtype);
  p.dropout_p = dropout_p;
  p.keep_scale = dropout_p > 0.0f ? 1.0f / (1.0f - dropout_p) : 1.0f;
  p.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  p.scale_log2 = p.scale * kLog2e;
  p.key = key;
  return p;
}

// Calls f(TypeTag<T>{}, std::integral_constant<int, D>{}) for a supported (dtype, head_dim).
template <typename F>
void dispatch(DType dtype, int64_t head_dim, F&& f) {
  auto with_dim = [&](auto tag) {
    if (head_dim == 64)
      f(tag, std::integral_constant<int, 64>{});
    else
      f(tag, std::integral_constant<int, 128>{});
  };
  if (dtype == DType::bf16)
    with_dim(TypeTag<__nv_bfloat16>{});
  else
    with_dim(TypeTag<__half>{});
}

// Grid of the per-tile kernels: x the (sentence, head) pair, y the tile (at most 65535 tiles).
inline dim3 tile_grid(const Params& p, int64_t rows) {
  return dim3(static_cast<unsigned>(p.batch * p.heads),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

// Blocks of `kernel` that fit on the whole GPU at once (SMs x blocks per SM), at least 1.
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, size_t shared_bytes) {
  return multiprocessor_count() * resident_blocks_per_sm(kernel, threads, shared_bytes);
}

// Grid of a persistent kernel whose blocks walk `items` work items (block i takes i, i + grid,
// ...): at most `slots` blocks, sized so every block gets the same number of items (±1 only when
// items are fewer than that would need).
inline unsigned persistent_grid(int items, int slots) {
  const int per_block = (items + slots - 1) / slots;
  return static_cast<unsigned>(per_block > 0 ? (items + per_block - 1) / per_block : 1);
}

// Launches a persistent kernel (kThreads threads, `smem` bytes of dynamic shared memory) over
// the (sentence, head) items (of p.pack sentences each); `slots` caches its resident-block count, 0
// until the first launch.
template <typename Kernel>
void launch_persistent(Kernel kernel, int& slots, size_t smem, const Params& p,
                       cudaStream_t stream) {
  if (slots == 0) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    slots = resident_blocks(kernel, kThreads, smem);
  }
  kernel<<<persistent_grid(item_count(p), slots), kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

// Whether the wgmma (sm_90a) kernel variants can run on the current GPU; probed once per process
// (wgmma_probe.cu).
bool wgmma_kernels_usable();

// rowsum(d_out * out) per query and head, into p.delta (backward.cu).
void launch_backward_delta(DType dtype, int head_dim, const Params& p, cudaStream_t stream);
// The whole backward when q_len and kv_len are at most 64 and head_dim is 64
// (backward_short.cu).
void launch_backward_short(DType dtype, const Params& p, cudaStream_t stream);
// Forward for long query sequences with wgmma; needs p.vector_io and wgmma_kernels_usable()
// (forward_wgmma.cu).
void launch_forward_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream);
// The short-sentence forward and backward (head_dim 64) on wgmma; need p.vector_io and
// wgmma_kernels_usable() (short_wgmma.cu). The backward also adds its gradients' column sums to
// the non-empty bias_grads (checked by the dispatch) and returns whether there were any.
void launch_forward_short_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream);
bool launch_backward_short_wgmma(DType dtype, Params p, const AttentionBiasGrads& bias_grads,
                                 cudaStream_t stream);
// dQ for every query tile, looping over key tiles (backward_dq.cu).
void launch_backward_dq(DType dtype, int head_dim, const Params& p, cudaStream_t stream);
// The warpgroup-MMA (sm_90a) kernels for kv_len > 64 (backward_wgmma.cu), for
// when p.vector_io and wgmma_kernels_usable(). The dQ kernel runs first: it also computes delta
// into p.delta (scratch of [batch, heads, q_len] floats), which the dK/dV kernel reads.
void launch_backward_dkdv_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream);
void launch_backward_dq_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream);

}  // namespace nmt::cuda::flash
