// Fused attention forward on the GPU: one block of 4 warps per (query tile, sentence, head); a
// warp owns kRowTiles x 16 queries, so each K or V fragment read from shared memory feeds kRowTiles
// MMAs (2 for long sequences: shared-memory bandwidth, not the tensor cores, bounds mma.sync with
// 16 rows per warp; 1 when q_len <= 64, where a 128-row tile would be half empty). The Q tile
// stays in registers as MMA fragments; K and V tiles of 64 keys stream through a two-stage
// cp.async pipeline; scores live only in registers, with an online softmax (running row max and
// sum, the output rescaled when the max grows). Key tiles past the sentence's length, or past the
// diagonal when causal, are never loaded. Writes out and the log-sum-exp of each query.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/flash_attention.h"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/stream.h"

namespace nmt::cuda::flash {
namespace {

// One key tile of the online softmax for a warp's kRowTiles x 16 queries (the first is query0):
// scores against the tile's 64 keys from n0 on, softmax_key_tile, and o += p v.
template <typename T, int D, int kRowTiles>
__device__ __forceinline__ void attend_key_tile(const Params& p, const T* tile_k, const T* tile_v,
                                                const uint8_t* warp_keep,
                                                const uint32_t (&q_frag)[kRowTiles][D / 16][4],
                                                float (&o)[kRowTiles][D / 8][4],
                                                float (&row_max)[kRowTiles][2],
                                                float (&row_sum)[kRowTiles][2], int n0, int length,
                                                int query0, int lane) {
  float s[kRowTiles][8][4];
  score_tile<T, D, kRowTiles>(s, q_frag, tile_k, lane);
  softmax_key_tile<D, kRowTiles>(p, s, o, row_max, row_sum, warp_keep, n0, length, query0, lane);
  accumulate_pv<T, D, kRowTiles>(o, s, tile_v, lane);
}

template <typename T, int D, int kRowTiles>
__global__ void __launch_bounds__(kThreads) forward_kernel(const Params p) {
  constexpr int kRows = kRowTiles * kTile;  // queries per block
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_q = reinterpret_cast<T*>(smem);                                       // kRows rows
  T* s_k = s_q + kRowTiles * kTileElements<D>;                               // two stages
  T* s_v = s_k + 2 * kTileElements<D>;                                       // two stages
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_v + 2 * kTileElements<D>);  // [kRows][kMaskStride]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  // Last tiles first: with a causal mask they have the most keys, and start before the short ones.
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int length = clamped_length(p, b);
  // Keys [0, key_end) are visible to some query of the tile.
  const int key_end = p.causal ? min(length, m0 + kRows) : length;
  const int key_tiles = (key_end + kTile - 1) / kTile;
  const int q_rows = min(kRows, p.q_len - m0);
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(b) * p.q_len + m0) * p.out_stride + h * D;
  float* lse = p.lse + static_cast<int64_t>(bh) * p.q_len + m0;

  if (key_tiles == 0) {  // every key masked for the whole tile: out 0, lse -inf
    zero_rows<T, D>(out, p.out_stride, q_rows);
    for (int r = threadIdx.x; r < q_rows; r += kThreads) lse[r] = -INFINITY;
    return;
  }
  const T* q =
      static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.q_len + m0) * p.q_stride + h * D;
  const T* k = static_cast<const T*>(p.k) + static_cast<int64_t>(b) * p.kv_len * p.k_stride + h * D;
  const T* v = static_cast<const T*>(p.v) + static_cast<int64_t>(b) * p.kv_len * p.v_stride + h * D;
#pragma unroll
  for (int rt = 0; rt < kRowTiles; ++rt)
    load_tile<T, D>(s_q + rt * kTileElements<D>, q + rt * kTile * p.q_stride, p.q_stride,
                    q_rows - rt * kTile, p.vector_io);
  load_tile<T, D>(s_k, k, p.k_stride, min(kTile, length), p.vector_io);
  load_tile<T, D>(s_v, v, p.v_stride, min(kTile, length), p.vector_io);
  cp_async_commit();

  const bool dropout = p.dropout_p > 0.0f;
  const int warp_row0 = warp * 16 * kRowTiles;  // first query of the warp, relative to m0
  uint32_t q_frag[kRowTiles][D / 16][4];
  float o[kRowTiles][D / 8][4] = {};
  // Per row tile, rows g and g + 8: running max and this thread's share of the sum (the 4
  // threads of a row add their shares at the end).
  float row_max[kRowTiles][2], row_sum[kRowTiles][2] = {};
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) row_max[mt][0] = row_max[mt][1] = -INFINITY;

  for (int j = 0; j < key_tiles; ++j) {
    const int stage = j % 2, n0 = j * kTile;
    if (j + 1 < key_tiles) {  // prefetch the next K, V tile into the other stage
      const int n1 = n0 + kTile;
      load_tile<T, D>(s_k + (1 - stage) * kTileElements<D>, k + n1 * p.k_stride, p.k_stride,
                      min(kTile, length - n1), p.vector_io);
      load_tile<T, D>(s_v + (1 - stage) * kTileElements<D>, v + n1 * p.v_stride, p.v_stride,
                      min(kTile, length - n1), p.vector_io);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if (dropout)
#pragma unroll
      for (int rt = 0; rt < kRowTiles; ++rt)
        fill_dropout_tile(s_keep + rt * kTile * kMaskStride, p.key, p.dropout_p,
                          (static_cast<uint64_t>(bh) * p.q_len + m0 + rt * kTile) * p.kv_len + n0,
                          p.kv_len);
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          ldmatrix_x4(q_frag[mt][kk], a_rows<D>(s_q, warp_row0 + mt * 16, kk * 16, lane));
    }
    attend_key_tile<T, D, kRowTiles>(p, s_k + stage * kTileElements<D>,
                                     s_v + stage * kTileElements<D>,
                                     s_keep + warp_row0 * kMaskStride, q_frag, o, row_max, row_sum,
                                     n0, length, m0 + warp_row0, lane);
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

  // Normalise, stage the warp's rows in its (no longer read) rows of s_q, write 16-byte chunks.
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt) {
    const int row0 = warp_row0 + mt * 16;  // relative to m0
    write_output_rows<T, D>(o[mt], row_max[mt], row_sum[mt], p, s_q + row0 * kRowStride<D>,
                            out + static_cast<int64_t>(row0) * p.out_stride, lse + row0,
                            min(16, q_rows - row0), lane);
  }
}

// Short sentences (q_len and kv_len <= 64, the NMT case): a (sentence, head) is one tile, too
// little work for a block to hide its load latency behind. A persistent grid instead walks the
// (sentence, head) items, each block loading the next item's Q, K and V into the second
// shared-memory stage while it computes the current one.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) forward_short_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_tiles = reinterpret_cast<T*>(smem);  // [stage][q, k, v][kTileElements<D>]
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_tiles + 6 * kTileElements<D>);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto tile = [&](int stage, int operand) {
    return s_tiles + (3 * stage + operand) * kTileElements<D>;
  };
  auto load_item = [&](int item, int stage, int length) {
    const int b = item / p.heads, h = item % p.heads;
    const int64_t q_row0 = static_cast<int64_t>(b) * p.q_len;
    const int64_t kv_row0 = static_cast<int64_t>(b) * p.kv_len;
    load_tile<T, D>(tile(stage, 0), static_cast<const T*>(p.q) + q_row0 * p.q_stride + h * D,
                    p.q_stride, p.q_len, p.vector_io);
    load_tile<T, D>(tile(stage, 1), static_cast<const T*>(p.k) + kv_row0 * p.k_stride + h * D,
                    p.k_stride, length, p.vector_io);
    load_tile<T, D>(tile(stage, 2), static_cast<const T*>(p.v) + kv_row0 * p.v_stride + h * D,
                    p.v_stride, length, p.vector_io);
  };
  for_each_item_prefetched(p, load_item, [&](int item, int stage, int length) {
    const int b = item / p.heads, h = item % p.heads;
    if (p.dropout_p > 0.0f)
      fill_dropout_tile(s_keep, p.key, p.dropout_p,
                        static_cast<uint64_t>(item) * p.q_len * p.kv_len, p.kv_len);
    __syncthreads();
    uint32_t q_frag[1][D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldmatrix_x4(q_frag[0][kk], a_rows<D>(tile(stage, 0), warp * 16, kk * 16, lane));
    float o[1][D / 8][4] = {};
    float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {};
    attend_key_tile<T, D, 1>(p, tile(stage, 1), tile(stage, 2), s_keep + warp * 16 * kMaskStride,
                             q_frag, o, row_max, row_sum, 0, length, warp * 16, lane);
    // The warp's own Q rows (read into q_frag above) stage its output rows.
    const int64_t out_row0 = static_cast<int64_t>(b) * p.q_len + warp * 16;
    write_output_rows<T, D>(o[0], row_max[0], row_sum[0], p,
                            tile(stage, 0) + warp * 16 * kRowStride<D>,
                            static_cast<T*>(p.out) + out_row0 * p.out_stride + h * D,
                            p.lse + static_cast<int64_t>(item) * p.q_len + warp * 16,
                            min(16, p.q_len - warp * 16), lane);
  });
}

template <typename T, int D>
void launch_forward_short(const Params& p, cudaStream_t stream) {
  const size_t smem = 6 * kTileElements<D> * sizeof(T) + kTile * kMaskStride;
  static int slots = 0;
  launch_persistent(forward_short_kernel<T, D>, slots, smem, p, stream);
}

template <typename T, int D, int kRowTiles>
void launch_forward(const Params& p, cudaStream_t stream) {
  const size_t smem =
      (kRowTiles + 4) * kTileElements<D> * sizeof(T) + kRowTiles * kTile * kMaskStride;
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<T, D, kRowTiles>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads),
                  static_cast<unsigned>((p.q_len + kRowTiles * kTile - 1) / (kRowTiles * kTile)));
  forward_kernel<T, D, kRowTiles><<<grid, kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace nmt::cuda::flash

namespace nmt::cuda {

bool fused_attention_supported(DType dtype, int64_t head_dim) {
  return (dtype == DType::bf16 || dtype == DType::f16) && (head_dim == 64 || head_dim == 128);
}

bool fused_attention_forward(const AttentionOperands& in, const Tensor& kv_lengths, Tensor& out,
                             Tensor& lse, const AttentionShape& shape, float dropout_p,
                             const RngKey& key, const Tensor& keep_bits) {
  constexpr const char* op = "fused_attention_forward";
  flash::require_supported(op, in.q.dtype, shape);
  if (shape.batch == 0 || shape.q_len == 0) return false;
  flash::Params p = flash::make_params(in, kv_lengths, shape, dropout_p, key);
  p.out = out.data;
  p.out_stride = out.dim(1);
  p.lse = static_cast<float*>(lse.data);
  p.vector_io = p.vector_io && flash::aligned16(out.data, out.dim(1), 0, out.dtype);
  cudaStream_t stream = current_stream();
  // Long queries on Hopper: the wgmma kernel (it needs 16-byte rows). The mma.sync kernels below
  // are the fallback everywhere else.
  if (p.vector_io && shape.q_len > flash::kTile && flash::wgmma_kernels_usable()) {
    flash::launch_forward_wgmma(in.q.dtype, static_cast<int>(shape.head_dim), p, stream);
    return false;
  }
  bool kept_bits = false;
  flash::dispatch(in.q.dtype, shape.head_dim, [&](auto type_tag, auto dim_tag) {
    using T = typename decltype(type_tag)::type;
    constexpr int D = decltype(dim_tag)::value;
    // Two 16-row MMA tiles per warp (128-query blocks) for long queries with D = 64; D = 128
    // would spill its accumulators, and q_len <= 64 would leave half the block empty.
    if (shape.q_len <= flash::kTile && shape.kv_len <= flash::kTile) {
      if (p.vector_io && flash::wgmma_kernels_usable()) {
        // The backward that reads the keep bits is the head_dim 64 short wgmma kernel (kv_len > 0).
        if (D == 64 && dropout_p > 0.0f && shape.kv_len > 0 && !keep_bits.empty()) {
          p.keep_bits = static_cast<uint32_t*>(keep_bits.data);
          kept_bits = true;
        }
        return flash::launch_forward_short_wgmma(in.q.dtype, D, p, stream);
      }
      return flash::launch_forward_short<T, D>(p, stream);
    }
    if constexpr (D == 64) {
      if (shape.q_len > flash::kTile) return flash::launch_forward<T, D, 2>(p, stream);
    }
    flash::launch_forward<T, D, 1>(p, stream);
  });
  return kept_bits;
}

}  // namespace nmt::cuda
