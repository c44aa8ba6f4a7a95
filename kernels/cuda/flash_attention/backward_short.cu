// Fused attention backward for short sentences (q_len and kv_len <= 64, head_dim 64: the NMT
// case). A (sentence, head) is then one query tile against one key tile, so the block that owns
// its keys owns complete dQ rows too, and delta comes from the staged out tile. Such a block is
// too short-lived to hide its load latency; a persistent grid instead walks the (sentence, head)
// items, each block loading the next item's K, V, Q, dO, out and lse into the second
// shared-memory stage while it computes the current one. Deterministic: no atomics.
#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/backward_tile.cuh"
#include "kernels/cuda/flash_attention/launch.cuh"

namespace nmt::cuda::flash {
namespace {

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) backward_short_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_tiles = reinterpret_cast<T*>(smem);  // [stage][k, v, q, d_out, out][kTileElements<D>]
  float* s_lse =
      reinterpret_cast<float*>(s_tiles + 2 * kOperands * kTileElements<D>);  // [2][kTile]
  float* s_delta = s_lse + 2 * kTile;                                        // [kTile]
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_delta + kTile);             // [query][key]
  T* s_ds = reinterpret_cast<T*>(s_keep + kTile * kMaskStride);              // [key][query]
  const int warp = threadIdx.x / 32;
  auto tile = [&](int stage, int operand) {
    return s_tiles + (kOperands * stage + operand) * kTileElements<D>;
  };
  auto load_item = [&](int item, int stage, int length) {
    const int b = item / p.heads, h = item % p.heads;
    const int64_t q_row0 = static_cast<int64_t>(b) * p.q_len;
    const int64_t kv_row0 = static_cast<int64_t>(b) * p.kv_len;
    auto source = [&](const void* base, int64_t row0, int64_t stride) {
      return static_cast<const T*>(base) + row0 * stride + h * D;
    };
    load_tile<T, D>(tile(stage, 0), source(p.k, kv_row0, p.k_stride), p.k_stride, length,
                    p.vector_io);
    load_tile<T, D>(tile(stage, 1), source(p.v, kv_row0, p.v_stride), p.v_stride, length,
                    p.vector_io);
    load_tile<T, D>(tile(stage, 2), source(p.q, q_row0, p.q_stride), p.q_stride, p.q_len,
                    p.vector_io);
    load_tile<T, D>(tile(stage, 3), source(p.d_out, q_row0, p.d_out_stride), p.d_out_stride,
                    p.q_len, p.vector_io);
    load_tile<T, D>(tile(stage, 4), source(p.out, q_row0, p.out_stride), p.out_stride, p.q_len,
                    p.vector_io);
    if (threadIdx.x < kTile) {
      // +inf for rows past q_len and for queries with no visible key (lse -inf): P = 0 there.
      const float l = static_cast<int>(threadIdx.x) < p.q_len
                          ? p.lse[static_cast<int64_t>(item) * p.q_len + threadIdx.x]
                          : -INFINITY;
      s_lse[stage * kTile + threadIdx.x] = l == -INFINITY ? INFINITY : l * kLog2e;
    }
  };
  for_each_item_prefetched(p, load_item, [&](int item, int stage, int length) {
    const int b = item / p.heads, h = item % p.heads;
    if (p.dropout_p > 0.0f)
      fill_dropout_tile(s_keep, p.key, p.dropout_p,
                        static_cast<uint64_t>(item) * p.q_len * p.kv_len, p.kv_len);
    __syncthreads();
    T* s_k = tile(stage, 0);
    T* s_v = tile(stage, 1);
    T* s_do = tile(stage, 3);
    stage_tile_delta<T, D>(tile(stage, 4), s_do, s_delta);
    __syncthreads();
    float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
    key_tile_products<T, D, true>(p, s_k, s_v, tile(stage, 2), s_do, s_lse + stage * kTile, s_delta,
                                  s_keep, s_ds, dk_acc, dv_acc, 0, 0, length);
    __syncthreads();  // s_ds complete; every warp is done with the q and d_out tiles
    const int64_t q_row0 = static_cast<int64_t>(b) * p.q_len;
    write_fused_dq_rows<T, D>(p, s_ds, s_k, s_do + warp * 16 * kRowStride<D>,
                              static_cast<T*>(p.dq) + q_row0 * p.dq_stride + h * D, 0);
    __syncthreads();  // every warp is done reading s_k before it stages dK rows there
    const int64_t kv_row0 = static_cast<int64_t>(b) * p.kv_len;
    write_key_rows<T, D>(p, dk_acc, dv_acc, s_k, s_v,
                         static_cast<T*>(p.dk) + kv_row0 * p.dk_stride + h * D,
                         static_cast<T*>(p.dv) + kv_row0 * p.dv_stride + h * D, p.kv_len);
  });
}

}  // namespace

void launch_backward_short(DType dtype, const Params& p, cudaStream_t stream) {
  constexpr int D = 64;
  dispatch(dtype, D, [&](auto type_tag, auto) {
    using T = typename decltype(type_tag)::type;
    const size_t smem = (2 * kOperands * kTileElements<D> + kTileElements<kTile>)*sizeof(T) +
                        3 * kTile * sizeof(float) + kTile * kMaskStride;
    static int slots = 0;
    launch_persistent(backward_short_kernel<T, D>, slots, smem, p, stream);
  });
}

}  // namespace nmt::cuda::flash
