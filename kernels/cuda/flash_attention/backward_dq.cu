// Fused attention backward, dQ part (used when kv_len > 64; see backward.cu): one
// block per (64-query tile, sentence, head) loops over the visible key tiles like the forward,
// recomputes P from the saved lse, dP = dO vᵀ, dS = P * (dP * Z - delta), and sums dQ = dS k in
// registers. Q and dO fragments stay in registers for D = 64 (re-read from shared memory for
// D = 128, where they would spill); K and V stream through two cp.async stages.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/launch.cuh"

namespace nmt::cuda::flash {
namespace {

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const Params p) {
  constexpr bool kFragmentsInRegisters = D <= 64;
  constexpr int kFragments = kFragmentsInRegisters ? D / 16 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  T* s_q = reinterpret_cast<T*>(smem);
  T* s_do = s_q + kTileElements<D>;
  T* s_k = s_do + kTileElements<D>;                                          // two stages
  T* s_v = s_k + 2 * kTileElements<D>;                                       // two stages
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_v + 2 * kTileElements<D>);  // [query][key]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kTile;  // longest (causal) tiles first
  const int length = clamped_length(p, b);
  const int key_end = p.causal ? min(length, m0 + kTile) : length;
  const int key_tiles = (key_end + kTile - 1) / kTile;
  const int q_rows = min(kTile, p.q_len - m0);
  const int64_t q_row0 = static_cast<int64_t>(b) * p.q_len + m0;
  T* dq = static_cast<T*>(p.dq) + q_row0 * p.dq_stride + h * D;
  if (key_tiles == 0) {
    zero_rows<T, D>(dq, p.dq_stride, q_rows);
    return;
  }
  const T* k = static_cast<const T*>(p.k) + static_cast<int64_t>(b) * p.kv_len * p.k_stride + h * D;
  const T* v = static_cast<const T*>(p.v) + static_cast<int64_t>(b) * p.kv_len * p.v_stride + h * D;
  load_tile<T, D>(s_q, static_cast<const T*>(p.q) + q_row0 * p.q_stride + h * D, p.q_stride, q_rows,
                  p.vector_io);
  load_tile<T, D>(s_do, static_cast<const T*>(p.d_out) + q_row0 * p.d_out_stride + h * D,
                  p.d_out_stride, q_rows, p.vector_io);
  load_tile<T, D>(s_k, k, p.k_stride, min(kTile, length), p.vector_io);
  load_tile<T, D>(s_v, v, p.v_stride, min(kTile, length), p.vector_io);
  cp_async_commit();

  const bool dropout = p.dropout_p > 0.0f;
  const int row0 = m0 + warp * 16 + g;  // query of accumulator elements 0, 1; row0 + 8 for 2, 3
  float lse_log2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    const float l = t < p.q_len ? p.lse[static_cast<int64_t>(bh) * p.q_len + t] : -INFINITY;
    lse_log2[r] = l == -INFINITY ? INFINITY : l * kLog2e;  // no visible key: P = 0
    delta[r] = t < p.q_len ? p.delta[static_cast<int64_t>(bh) * p.q_len + t] : 0.0f;
  }
  uint32_t q_frag[kFragments][4], do_frag[kFragments][4];
  float dq_acc[D / 8][4] = {};

  for (int j = 0; j < key_tiles; ++j) {
    const int stage = j % 2, n0 = j * kTile;
    if (j + 1 < key_tiles) {
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
      fill_dropout_tile(s_keep, p.key, p.dropout_p,
                        (static_cast<uint64_t>(bh) * p.q_len + m0) * p.kv_len + n0, p.kv_len);
    __syncthreads();
    if (kFragmentsInRegisters && j == 0) {
#pragma unroll
      for (int kk = 0; kk < kFragments; ++kk) {
        ldmatrix_x4(q_frag[kk], a_rows<D>(s_q, warp * 16, kk * 16, lane));
        ldmatrix_x4(do_frag[kk], a_rows<D>(s_do, warp * 16, kk * 16, lane));
      }
    }
    const T* tile_k = s_k + stage * kTileElements<D>;
    const T* tile_v = s_v + stage * kTileElements<D>;

    // S = q kᵀ and dP = dO vᵀ for the warp's 16 queries and the tile's 64 keys.
    float prob[8][4] = {}, ds[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[4], doa[4];
      if (kFragmentsInRegisters) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          qa[i] = q_frag[kFragmentsInRegisters ? kk : 0][i];
          doa[i] = do_frag[kFragmentsInRegisters ? kk : 0][i];
        }
      } else {
        ldmatrix_x4(qa, a_rows<D>(s_q, warp * 16, kk * 16, lane));
        ldmatrix_x4(doa, a_rows<D>(s_do, warp * 16, kk * 16, lane));
      }
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, b_rows_nk<D>(tile_k, np * 16, kk * 16, lane));
        mma<T>(prob[2 * np], qa, bf[0], bf[1]);
        mma<T>(prob[2 * np + 1], qa, bf[2], bf[3]);
        ldmatrix_x4(bf, b_rows_nk<D>(tile_v, np * 16, kk * 16, lane));
        mma<T>(ds[2 * np], doa, bf[0], bf[1]);
        mma<T>(ds[2 * np + 1], doa, bf[2], bf[3]);
      }
    }
    const bool masked_tile = n0 + kTile > length || (p.causal && n0 + kTile - 1 > m0 + warp * 16);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, key = n0 + nt * 8 + 2 * t4 + (e & 1), query = row0 + 8 * r;
        float pr = fast_exp2(fmaf(prob[nt][e], p.scale_log2, -lse_log2[r]));
        if (masked_tile && (key >= length || (p.causal && key > query))) pr = 0.0f;
        float z = 1.0f;
        if (dropout)
          z = s_keep[(warp * 16 + g + 8 * r) * kMaskStride + nt * 8 + 2 * t4 + (e & 1)]
                  ? p.keep_scale
                  : 0.0f;
        ds[nt][e] = pr * (ds[nt][e] * z - delta[r]);
      }
      // dQ += dS k (scaled by 1/sqrt(dh) at the end).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t a[4] = {pack2<T>(ds[2 * kk][0], ds[2 * kk][1]),
                             pack2<T>(ds[2 * kk][2], ds[2 * kk][3]),
                             pack2<T>(ds[2 * kk + 1][0], ds[2 * kk + 1][1]),
                             pack2<T>(ds[2 * kk + 1][2], ds[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bf[4];
        ldmatrix_x4_trans(bf, b_rows_kn<D>(tile_k, kk * 16, dp * 16, lane));
        mma<T>(dq_acc[2 * dp], a, bf[0], bf[1]);
        mma<T>(dq_acc[2 * dp + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();  // the next prefetch overwrites this stage
  }

  T* staged = s_q + warp * 16 * kRowStride<D>;  // the warp's own rows, read by no other warp
  stage_accumulators<T, D>(staged, dq_acc, p.scale, lane);
  __syncwarp();
  const int rows = min(16, q_rows - warp * 16);
  if (rows > 0)
    store_warp_rows<T, D>(dq + static_cast<int64_t>(warp * 16) * p.dq_stride, p.dq_stride, staged,
                          rows, p.vector_io, lane);
}

template <typename T, int D>
void launch_dq(const Params& p, cudaStream_t stream) {
  const size_t smem = 6 * kTileElements<D> * sizeof(T) + kTile * kMaskStride;
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(dq_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  dq_kernel<T, D><<<tile_grid(p, p.q_len), kThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_backward_dq(DType dtype, int head_dim, const Params& p, cudaStream_t stream) {
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    launch_dq<typename decltype(type_tag)::type, decltype(dim_tag)::value>(p, stream);
  });
}

}  // namespace nmt::cuda::flash
