// Per-tile pieces of the fused attention backward (backward*.cu): the products of
// one key tile with one query tile (dK, dV and optionally dSᵀ for dQ), the delta of a staged
// query tile, the complete dQ rows when a block holds every key, and the dK/dV write-out.
#pragma once

#include "kernels/cuda/flash_attention/common.cuh"

namespace nmt::cuda::flash {

// delta = rowsum(out * d_out) of a staged [kTile] query tile (two threads a row, the whole
// block), into tile_delta[kTile]; a barrier must follow before use.
template <typename T, int D>
__device__ __forceinline__ void stage_tile_delta(const T* tile_o, const T* tile_do,
                                                 float* tile_delta) {
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  const T* o_row = tile_o + row * kRowStride<D> + half * (D / 2);
  const T* do_row = tile_do + row * kRowStride<D> + half * (D / 2);
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < D / 2; c += 2) {
    const float2 o2 = to_float2(*reinterpret_cast<const typename Vec2<T>::type*>(o_row + c));
    const float2 d2 = to_float2(*reinterpret_cast<const typename Vec2<T>::type*>(do_row + c));
    sum += o2.x * d2.x + o2.y * d2.y;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if (half == 0) tile_delta[row] = sum;
}

// One 64-key tile (keys n0.., K and V in s_k, s_v; the warp owns 16 of them) against one staged
// query tile (first query m0): dV += (P * Z)ᵀ dO and dK += dSᵀ q into the warp's accumulators
// (dK still without the 1/sqrt(dh) factor), P recomputed from the tile's lse (log2 units, +inf
// where nothing is visible) and Z the dropout mask in s_keep ([query][key]). With kFuseDq, dSᵀ
// is also kept in s_ds ([key][query]) for the dQ product. D = 128 takes the queries 16 at a time
// so the accumulators and a chunk's scores fit without spilling.
template <typename T, int D, bool kFuseDq>
__device__ __forceinline__ void key_tile_products(
    const Params& p, const T* s_k, const T* s_v, const T* tile_q, const T* tile_do,
    const float* tile_lse, const float* tile_delta, const uint8_t* s_keep, T* s_ds,
    float (&dk_acc)[D / 8][4], float (&dv_acc)[D / 8][4], int n0, int m0, int length) {
  constexpr int kChunk = D <= 64 ? 64 : 16;  // queries per inner step
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const bool dropout = p.dropout_p > 0.0f;
  const int key0 = n0 + warp * 16 + g;  // key of accumulator rows 0, 1; key0 + 8 for 2, 3
  // Not unrolled: unrolled, the compiler overlaps the chunks and spills.
#pragma unroll 1
  for (int qc = 0; qc < kTile; qc += kChunk) {
    // Sᵀ = k qᵀ: rows are the warp's 16 keys, columns the chunk's queries.
    float pt[kChunk / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows<D>(s_k, warp * 16, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < kChunk / 16; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, b_rows_nk<D>(tile_q, qc + np * 16, kk * 16, lane));
        mma<T>(pt[2 * np], a, bf[0], bf[1]);
        mma<T>(pt[2 * np + 1], a, bf[2], bf[3]);
      }
    }
    // Pᵀ from the saved lse; masked keys (past the length, or after the query) get 0.
    const bool masked = n0 + kTile > length || (p.causal && n0 + warp * 16 + 15 > m0 + qc);
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int query = qc + nt * 8 + 2 * t4 + (e & 1), key = key0 + (e / 2) * 8;
        const float prob = fast_exp2(fmaf(pt[nt][e], p.scale_log2, -tile_lse[query]));
        pt[nt][e] = masked && (key >= length || (p.causal && key > m0 + query)) ? 0.0f : prob;
      }
    // The dropout factor Z of accumulator element (nt, e).
    auto keep_factor = [&](int nt, int e) {
      if (!dropout) return 1.0f;
      const int query = qc + nt * 8 + 2 * t4 + (e & 1), key = warp * 16 + g + (e / 2) * 8;
      return s_keep[query * kMaskStride + key] ? p.keep_scale : 0.0f;
    };
    // dV += (P * Z)ᵀ dO.
#pragma unroll
    for (int kq = 0; kq < kChunk / 16; ++kq) {
      uint32_t a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int nt = 2 * kq + i / 2, e = (i % 2) * 2;
        a[i] = pack2<T>(pt[nt][e] * keep_factor(nt, e), pt[nt][e + 1] * keep_factor(nt, e + 1));
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bf[4];
        ldmatrix_x4_trans(bf, b_rows_kn<D>(tile_do, qc + kq * 16, dp * 16, lane));
        mma<T>(dv_acc[2 * dp], a, bf[0], bf[1]);
        mma<T>(dv_acc[2 * dp + 1], a, bf[2], bf[3]);
      }
    }
    // dPᵀ = v dOᵀ, then dSᵀ = P * (dP * Z - delta) in place.
    float ds[kChunk / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, a_rows<D>(s_v, warp * 16, kk * 16, lane));
#pragma unroll
      for (int np = 0; np < kChunk / 16; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, b_rows_nk<D>(tile_do, qc + np * 16, kk * 16, lane));
        mma<T>(ds[2 * np], a, bf[0], bf[1]);
        mma<T>(ds[2 * np + 1], a, bf[2], bf[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kChunk / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int query = qc + nt * 8 + 2 * t4 + (e & 1);
        ds[nt][e] = pt[nt][e] * (ds[nt][e] * keep_factor(nt, e) - tile_delta[query]);
      }
      // dK += dSᵀ q (the 1/sqrt(dh) of the scores is applied once at the end).
#pragma unroll
    for (int kq = 0; kq < kChunk / 16; ++kq) {
      uint32_t a[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int nt = 2 * kq + i / 2, e = (i % 2) * 2;
        a[i] = pack2<T>(ds[nt][e], ds[nt][e + 1]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bf[4];
        ldmatrix_x4_trans(bf, b_rows_kn<D>(tile_q, qc + kq * 16, dp * 16, lane));
        mma<T>(dk_acc[2 * dp], a, bf[0], bf[1]);
        mma<T>(dk_acc[2 * dp + 1], a, bf[2], bf[3]);
      }
    }
    if constexpr (kFuseDq) {  // keep dSᵀ ([key][query]) for the dQ product below
#pragma unroll
      for (int nt = 0; nt < kChunk / 8; ++nt) {
        const int col = qc + nt * 8 + 2 * t4, row = warp * 16 + g;
        *reinterpret_cast<uint32_t*>(s_ds + row * kRowStride<kTile> + col) =
            pack2<T>(ds[nt][0], ds[nt][1]);
        *reinterpret_cast<uint32_t*>(s_ds + (row + 8) * kRowStride<kTile> + col) =
            pack2<T>(ds[nt][2], ds[nt][3]);
      }
    }
  }
}

// dQ rows of the staged query tile (first query m0) when the block holds every key: each warp
// takes 16 queries, dQ = dS k over the 64 keys (dSᵀ in s_ds, K in s_k), staged in the warp's
// 16 rows `staged` and written to dq (the sentence's row 0, head column).
template <typename T, int D>
__device__ __forceinline__ void write_fused_dq_rows(const Params& p, const T* s_ds, const T* s_k,
                                                    T* staged, T* dq, int m0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float dq_acc[D / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    ldmatrix_x4_trans(a, b_rows_nk<kTile>(s_ds, kk * 16, warp * 16, lane));
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b_rows_kn<D>(s_k, kk * 16, dp * 16, lane));
      mma<T>(dq_acc[2 * dp], a, bf[0], bf[1]);
      mma<T>(dq_acc[2 * dp + 1], a, bf[2], bf[3]);
    }
  }
  stage_accumulators<T, D>(staged, dq_acc, p.scale, lane);
  __syncwarp();
  const int rows = min(16, p.q_len - m0 - warp * 16);
  if (rows > 0)
    store_warp_rows<T, D>(dq + static_cast<int64_t>(m0 + warp * 16) * p.dq_stride, p.dq_stride,
                          staged, rows, p.vector_io, lane);
}

// The warp's 16 rows of dK (times 1/sqrt(dh)) and dV, staged in its own rows of s_k and s_v
// (no longer read) and written to dk, dv (the tile's first key row, head column); kv_rows rows of
// the tile exist.
template <typename T, int D>
__device__ __forceinline__ void write_key_rows(const Params& p, float (&dk_acc)[D / 8][4],
                                               float (&dv_acc)[D / 8][4], T* s_k, T* s_v, T* dk,
                                               T* dv, int kv_rows) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  T* staged_k = s_k + warp * 16 * kRowStride<D>;
  T* staged_v = s_v + warp * 16 * kRowStride<D>;
  stage_accumulators<T, D>(staged_k, dk_acc, p.scale, lane);
  stage_accumulators<T, D>(staged_v, dv_acc, 1.0f, lane);
  __syncwarp();
  const int rows = min(16, kv_rows - warp * 16);
  if (rows > 0) {
    store_warp_rows<T, D>(dk + static_cast<int64_t>(warp * 16) * p.dk_stride, p.dk_stride, staged_k,
                          rows, p.vector_io, lane);
    store_warp_rows<T, D>(dv + static_cast<int64_t>(warp * 16) * p.dv_stride, p.dv_stride, staged_v,
                          rows, p.vector_io, lane);
  }
}

}  // namespace nmt::cuda::flash
