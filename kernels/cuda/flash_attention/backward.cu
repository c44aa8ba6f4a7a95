// Fused attention backward on the GPU, deterministic (no atomics): every output element is summed
// by exactly one thread in a fixed order.
//   1. delta = rowsum(d_out * out) per query and head (equals sum_s P dP, dropout included).
//      A separate kernel, except in the one-key-tile case below, which computes it itself.
//   2. One block per (64-key tile, sentence, head): dK and dV, looping over the query tiles that
//      see those keys; P is recomputed from q, k and the saved lse, the dropout mask regenerated.
//   3. dQ, one block per query tile looping over key tiles (backward_dq.cu).
// When kv_len <= 64 a key tile holds every key, so the dK/dV block also owns complete dQ rows: it
// writes them itself (dS through shared memory) and steps 1 and 3 are skipped; this is the NMT
// case, where the whole backward is one launch.
// Longer keys on Hopper with 16-byte aligned rows use the warpgroup-MMA kernels instead
// (backward_wgmma.cu: dQ with delta fused, then dK/dV); these mma.sync kernels
// remain the fallback.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/backward_tile.cuh"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/flash_attention.h"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda::flash {
namespace {

// One warp per (query row, head).
template <typename T, int D>
__global__ void delta_kernel(const Params p) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kDeltaWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= static_cast<int64_t>(p.batch) * p.q_len * p.heads) return;
  const int64_t row = item / p.heads;  // b * q_len + t
  const int h = static_cast<int>(item % p.heads);
  const T* o = static_cast<const T*>(p.out) + row * p.out_stride + h * D;
  const T* d = static_cast<const T*>(p.d_out) + row * p.d_out_stride + h * D;
  float sum = 0.0f;
#pragma unroll
  for (int c = lane; c < D; c += 32) sum += to_float(o[c]) * to_float(d[c]);
  sum = warp_sum(sum);
  const int64_t b = row / p.q_len, t = row % p.q_len;
  if (lane == 0) p.delta[(b * p.heads + h) * p.q_len + t] = sum;
}

// dK and dV of one key tile. K and V are read from shared memory at each use (as registers they
// would push the D = 64 kernel to 255 registers); with D = 128 the 64 queries of a tile are taken
// 32 at a time so that the dK, dV accumulators and the scores of a chunk fit without spilling.
template <typename T, int D, bool kFuseDq>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_k = reinterpret_cast<T*>(smem);
  T* s_v = s_k + kTileElements<D>;
  T* s_q = s_v + kTileElements<D>;                                       // two stages
  T* s_do = s_q + 2 * kTileElements<D>;                                  // two stages
  float* s_lse = reinterpret_cast<float*>(s_do + 2 * kTileElements<D>);  // [2][kTile], log2 units
  float* s_delta = s_lse + 2 * kTile;                                    // [2][kTile]
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_delta + 2 * kTile);     // [query][key]
  T* s_ds = reinterpret_cast<T*>(s_keep + kTile * kMaskStride);          // [key][query], kFuseDq
  T* s_o = s_ds + kTileElements<kTile>;  // two stages of the out tile, kFuseDq (for delta)

  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int n0 = blockIdx.y * kTile;
  const int length = clamped_length(p, b);
  const int key_rows = min(kTile, length - n0);  // keys of the tile inside the length
  const int kv_rows = min(kTile, p.kv_len - n0);
  const int first_q_tile = p.causal ? n0 / kTile : 0;  // earlier queries see none of these keys
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  const int64_t kv_row0 = static_cast<int64_t>(b) * p.kv_len + n0;
  T* dk = static_cast<T*>(p.dk) + kv_row0 * p.dk_stride + h * D;
  T* dv = static_cast<T*>(p.dv) + kv_row0 * p.dv_stride + h * D;
  T* dq = static_cast<T*>(p.dq) + static_cast<int64_t>(b) * p.q_len * p.dq_stride + h * D;

  if (key_rows <= 0 || first_q_tile >= q_tiles) {  // no query sees these keys: zero gradients
    zero_rows<T, D>(dk, p.dk_stride, kv_rows);
    zero_rows<T, D>(dv, p.dv_stride, kv_rows);
    if (kFuseDq) zero_rows<T, D>(dq, p.dq_stride, p.q_len);
    return;
  }
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(b) * p.q_len * p.q_stride + h * D;
  const T* d_out =
      static_cast<const T*>(p.d_out) + static_cast<int64_t>(b) * p.q_len * p.d_out_stride + h * D;
  const float* lse = p.lse + static_cast<int64_t>(bh) * p.q_len;
  const float* delta = kFuseDq ? nullptr : p.delta + static_cast<int64_t>(bh) * p.q_len;
  const T* out =
      static_cast<const T*>(p.out) + static_cast<int64_t>(b) * p.q_len * p.out_stride + h * D;
  auto load_query_tile = [&](int tile, int stage) {
    const int m = tile * kTile, rows = min(kTile, p.q_len - m);
    load_tile<T, D>(s_q + stage * kTileElements<D>, q + m * p.q_stride, p.q_stride, rows,
                    p.vector_io);
    load_tile<T, D>(s_do + stage * kTileElements<D>, d_out + m * p.d_out_stride, p.d_out_stride,
                    rows, p.vector_io);
    if (kFuseDq)
      load_tile<T, D>(s_o + stage * kTileElements<D>, out + m * p.out_stride, p.out_stride, rows,
                      p.vector_io);
    if (threadIdx.x < kTile) {
      const int t = m + threadIdx.x;
      // +inf for rows past q_len and for queries with no visible key (lse -inf): P = 0 there.
      const float l = t < p.q_len ? lse[t] : -INFINITY;
      s_lse[stage * kTile + threadIdx.x] = l == -INFINITY ? INFINITY : l * kLog2e;
      if (!kFuseDq) s_delta[stage * kTile + threadIdx.x] = t < p.q_len ? delta[t] : 0.0f;
    }
  };
  load_tile<T, D>(s_k, static_cast<const T*>(p.k) + kv_row0 * p.k_stride + h * D, p.k_stride,
                  key_rows, p.vector_io);
  load_tile<T, D>(s_v, static_cast<const T*>(p.v) + kv_row0 * p.v_stride + h * D, p.v_stride,
                  key_rows, p.vector_io);
  load_query_tile(first_q_tile, 0);
  cp_async_commit();

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};

  for (int tile = first_q_tile; tile < q_tiles; ++tile) {
    const int stage = (tile - first_q_tile) % 2, m0 = tile * kTile;
    if (tile + 1 < q_tiles) {
      load_query_tile(tile + 1, 1 - stage);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if (p.dropout_p > 0.0f)
      fill_dropout_tile(s_keep, p.key, p.dropout_p,
                        (static_cast<uint64_t>(bh) * p.q_len + m0) * p.kv_len + n0, p.kv_len);
    __syncthreads();
    const T* tile_q = s_q + stage * kTileElements<D>;
    const T* tile_do = s_do + stage * kTileElements<D>;
    const float* tile_lse = s_lse + stage * kTile;
    const float* tile_delta = s_delta + stage * kTile;
    if constexpr (kFuseDq) {
      stage_tile_delta<T, D>(s_o + stage * kTileElements<D>, tile_do, s_delta + stage * kTile);
      __syncthreads();
    }
    key_tile_products<T, D, kFuseDq>(p, s_k, s_v, tile_q, tile_do, tile_lse, tile_delta, s_keep,
                                     s_ds, dk_acc, dv_acc, n0, m0, length);
    if constexpr (kFuseDq) {
      __syncthreads();  // s_ds complete; also every warp is done with tile_q and tile_do
      write_fused_dq_rows<T, D>(
          p, s_ds, s_k, s_do + stage * kTileElements<D> + (threadIdx.x / 32) * 16 * kRowStride<D>,
          dq, m0);
    }
    __syncthreads();  // the next prefetch overwrites this stage
  }
  write_key_rows<T, D>(p, dk_acc, dv_acc, s_k, s_v, dk, dv, kv_rows);
}

template <typename T, int D, bool kFuseDq>
void launch_dkdv(const Params& p, cudaStream_t stream) {
  const size_t smem = 6 * kTileElements<D> * sizeof(T) + 4 * kTile * sizeof(float) +
                      kTile * kMaskStride +
                      (kFuseDq ? (kTileElements<kTile> + 2 * kTileElements<D>)*sizeof(T) : 0);
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel<T, D, kFuseDq>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  dkdv_kernel<T, D, kFuseDq><<<tile_grid(p, p.kv_len), kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_backward_delta(DType dtype, int head_dim, const Params& p, cudaStream_t stream) {
  const int64_t items = static_cast<int64_t>(p.batch) * p.q_len * p.heads;
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    delta_kernel<typename decltype(type_tag)::type, decltype(dim_tag)::value>
        <<<blocks_for(items, kDeltaWarps), kDeltaWarps * 32, 0, stream>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace nmt::cuda::flash

namespace nmt::cuda {

bool fused_attention_backward(const Tensor& d_out, const AttentionOperands& in, const Tensor& out,
                              const Tensor& lse, const Tensor& kv_lengths, AttentionOperands& grads,
                              const AttentionShape& shape, float dropout_p, const RngKey& key,
                              const Tensor& keep_bits, const AttentionBiasGrads& bias_grads) {
  constexpr const char* op = "fused_attention_backward";
  flash::require_supported(op, in.q.dtype, shape);
  if (shape.batch == 0 || (shape.q_len == 0 && shape.kv_len == 0)) return false;
  flash::Params p = flash::make_params(in, kv_lengths, shape, dropout_p, key);
  p.out = out.data;
  p.out_stride = out.dim(1);
  p.lse = static_cast<float*>(lse.data);
  p.d_out = d_out.data;
  p.d_out_stride = d_out.dim(1);
  p.dq = const_cast<void*>(flash::column(grads.q, grads.q_col));
  p.dk = const_cast<void*>(flash::column(grads.k, grads.k_col));
  p.dv = const_cast<void*>(flash::column(grads.v, grads.v_col));
  p.dq_stride = grads.q.dim(1);
  p.dk_stride = grads.k.dim(1);
  p.dv_stride = grads.v.dim(1);
  const DType dtype = in.q.dtype;
  p.vector_io = p.vector_io && flash::aligned16(out.data, out.dim(1), 0, dtype) &&
                flash::aligned16(d_out.data, d_out.dim(1), 0, dtype) &&
                flash::aligned16(grads.q.data, grads.q.dim(1), grads.q_col, dtype) &&
                flash::aligned16(grads.k.data, grads.k.dim(1), grads.k_col, dtype) &&
                flash::aligned16(grads.v.data, grads.v.dim(1), grads.v_col, dtype);
  cudaStream_t stream = current_stream();
  const int head_dim = static_cast<int>(shape.head_dim);
  // kv_len <= 64: one key tile per (sentence, head), which then also writes dQ and needs no delta.
  if (head_dim == 64 && shape.q_len > 0 && shape.q_len <= flash::kTile && shape.kv_len > 0 &&
      shape.kv_len <= flash::kTile) {
    if (!(p.vector_io && flash::wgmma_kernels_usable())) {
      flash::launch_backward_short(dtype, p, stream);
      return false;
    }
    // The forward that stored keep bits ran the short wgmma kernel for these operands too.
    if (dropout_p > 0.0f && !keep_bits.empty())
      p.keep_bits = static_cast<uint32_t*>(keep_bits.data);
    return flash::launch_backward_short_wgmma(dtype, p, bias_grads, stream);
  }
  const bool fuse_dq = shape.kv_len > 0 && shape.kv_len <= flash::kTile;
  // Long sequences on Hopper: the warpgroup-MMA kernels (they need 16-byte aligned rows).
  const bool use_wgmma = !fuse_dq && p.vector_io && flash::wgmma_kernels_usable();
  if (shape.q_len > 0 && !fuse_dq) {
    const size_t delta_bytes = static_cast<size_t>(shape.batch * shape.heads * shape.q_len) * 4;
    p.delta = static_cast<float*>(stream_resources(stream).scratch(delta_bytes));
    if (!use_wgmma) flash::launch_backward_delta(dtype, head_dim, p, stream);
  }
  if (use_wgmma) {
    // dQ first: besides dQ it computes delta, which the dK/dV kernel reads.
    if (shape.q_len > 0) flash::launch_backward_dq_wgmma(dtype, head_dim, p, stream);
    if (shape.kv_len > 0) flash::launch_backward_dkdv_wgmma(dtype, head_dim, p, stream);
    return false;
  }
  if (shape.kv_len > 0)
    flash::dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
      using T = typename decltype(type_tag)::type;
      constexpr int D = decltype(dim_tag)::value;
      if (fuse_dq)
        flash::launch_dkdv<T, D, true>(p, stream);
      else
        flash::launch_dkdv<T, D, false>(p, stream);
    });
  if (shape.q_len > 0 && !fuse_dq) flash::launch_backward_dq(dtype, head_dim, p, stream);
  return false;
}

}  // namespace nmt::cuda
