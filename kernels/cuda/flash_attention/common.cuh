// Building blocks of the fused attention kernels (kernels/cuda/flash_attention/*.cu): tensor-core
// MMA (mma.sync m16n8k16, fp32 accumulate) and ldmatrix wrappers, cp.async tile loads into padded
// shared memory, and the dropout mask of one tile from the shared Philox. The parameters are in
// params.h, the tile shape in traits_mma.h.
//
// Fragment layout of mma.sync m16n8k16 (lane = 4 * g + t4): the accumulator c[0..3] of a 16x8 tile
// holds (row g, cols 2*t4, 2*t4+1) and (row g+8, same cols); an A fragment a[0..3] holds
// (row g, k 2t4..+1), (row g+8, k 2t4..+1), (row g, k 2t4+8..+9), (row g+8, k 2t4+8..+9); a B
// fragment b[0..1] holds (k 2t4..+1, col g) and (k 2t4+8..+9, col g). Two neighbouring accumulator
// tiles therefore form the A fragment of the next product without any shuffle.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/flash_attention/params.h"
#include "kernels/cuda/flash_attention/traits_mma.h"
#include "kernels/philox.h"

namespace nmt::cuda::flash {

// Items of the persistent short kernels: (group of p.pack sentences, head), item = group * heads +
// head; with pack 1 the (sentence, head) pairs.
__host__ __device__ __forceinline__ int item_count(const Params& p) {
  return (p.batch + p.pack - 1) / p.pack * p.heads;
}

// A sentence's key length as given, clamped to [0, kv_len].
__device__ __forceinline__ int clamp_length(const Params& p, int given) {
  return given < 0 ? 0 : (given > p.kv_len ? p.kv_len : given);
}
__device__ __forceinline__ int clamped_length(const Params& p, int b) {
  return clamp_length(p, p.kv_lengths[b]);
}

// Two neighbouring elements as one 4-byte value, and their conversion to float.
template <typename T>
struct Vec2;
template <>
struct Vec2<__nv_bfloat16> {
  using type = __nv_bfloat162;
};
template <>
struct Vec2<__half> {
  using type = __half2;
};
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) {
  return __bfloat1622float2(v);
}
__device__ __forceinline__ float2 to_float2(__half2 v) {
  return __half22float2(v);
}

template <typename T>
__device__ __forceinline__ T zero_value() {
  return T(0.0f);
}

// c += a * b for a 16x16 A tile and a 16x8 B tile.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1);
template <>
__device__ __forceinline__ void mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                   uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives
// matrix i's (row lane/4, cols 2*(lane%4)..+1), or with .trans its (rows 2*(lane%4)..+1, col
// lane/4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// Addresses for ldmatrix_x4 over a row-major [rows][kRowStride] tile. A fragment of the 16x16
// block at (row0, col0):
template <int D, typename T>
__device__ __forceinline__ const T* a_rows(const T* tile, int row0, int col0, int lane) {
  return tile + (row0 + (lane % 16)) * kRowStride<D> + col0 + (lane / 16) * 8;
}
// B fragments of two n8 tiles when the tile is stored [n][k] (rows n0..n0+15, k from col0): b0, b1
// of tile n0 in r[0], r[1], of tile n0+8 in r[2], r[3], with plain ldmatrix. With ldmatrix .trans
// the same addresses give the A fragment of the 16x16 block whose transpose is stored at (n0,
// col0).
template <int D, typename T>
__device__ __forceinline__ const T* b_rows_nk(const T* tile, int n0, int col0, int lane) {
  return tile + (n0 + (lane % 8) + (lane / 16) * 8) * kRowStride<D> + col0 + ((lane / 8) % 2) * 8;
}
// B fragments of two n8 tiles when the tile is stored [k][n] (k rows k0..k0+15, n from n0), with
// ldmatrix .trans.
template <int D, typename T>
__device__ __forceinline__ const T* b_rows_kn(const T* tile, int k0, int n0, int lane) {
  return tile + (k0 + (lane % 8) + ((lane / 8) % 2) * 8) * kRowStride<D> + n0 + (lane / 16) * 8;
}

// s[mt] = the scores of the warp's row tiles (A fragments q_frag[mt]) against the 64 keys of a
// [kTile][kRowStride<D>] K tile: each K fragment read from shared memory feeds kRowTiles MMAs.
template <typename T, int D, int kRowTiles>
__device__ __forceinline__ void score_tile(float (&s)[kRowTiles][8][4],
                                           const uint32_t (&q_frag)[kRowTiles][D / 16][4],
                                           const T* tile_k, int lane) {
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_rows_nk<D>(tile_k, np * 16, kk * 16, lane));
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        mma<T>(s[mt][2 * np], q_frag[mt][kk], bf[0], bf[1]);
        mma<T>(s[mt][2 * np + 1], q_frag[mt][kk], bf[2], bf[3]);
      }
    }
}

// o[mt] += p[mt] v for the 64 keys of a [kTile][kRowStride<D>] V tile: the accumulators of key
// chunks 2kk, 2kk+1 are the A fragment of keys 16kk..16kk+15.
template <typename T, int D, int kRowTiles>
__device__ __forceinline__ void accumulate_pv(float (&o)[kRowTiles][D / 8][4],
                                              const float (&p)[kRowTiles][8][4], const T* tile_v,
                                              int lane) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[kRowTiles][4];
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt) {
      a[mt][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b_rows_kn<D>(tile_v, kk * 16, dp * 16, lane));
#pragma unroll
      for (int mt = 0; mt < kRowTiles; ++mt) {
        mma<T>(o[mt][2 * dp], a[mt], bf[0], bf[1]);
        mma<T>(o[mt][2 * dp + 1], a[mt], bf[2], bf[3]);
      }
    }
  }
}

// 4 bytes; src-size 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(smem)),
               "l"(gmem), "r"(valid ? 4 : 0));
}

// The item loop of the persistent short-sentence kernels: a block takes (sentence, head) items
// (item_count: of p.pack sentences each, length 0 where p.pack > 1) blockIdx.x, + gridDim.x, ...
// and loads each one a step ahead into the other of two shared-memory stages. load(item, stage,
// length) issues an item's cp.async loads; body(item, stage, length) runs once they have landed in
// this thread (it must make them visible to the block: a barrier, and for wgmma a proxy fence
// first). Sentence lengths are read from global memory one item before the load that needs them, so
// that read never stalls a prefetch.
template <typename Load, typename Body>
__device__ __forceinline__ void for_each_item_prefetched(const Params& p, Load&& load,
                                                         Body&& body) {
  const int items = item_count(p), grid = static_cast<int>(gridDim.x);
  // A packed item has a length a sentence: its loads read them (short_pack.cuh), not this.
  auto given_length = [&](int item) {
    return item < items && p.pack == 1 ? p.kv_lengths[item / p.heads] : 0;
  };
  int item = static_cast<int>(blockIdx.x);
  int length = clamp_length(p, given_length(item));
  int next_length = clamp_length(p, given_length(item + grid));
  if (item < items) load(item, 0, length);
  cp_async_commit();
  for (int i = 0; item < items; ++i, item += grid) {
    const int stage = i % 2;
    // Loaded here, clamped after the body: a use next to the load stalls the prefetch on it.
    const int given_after_next = given_length(item + 2 * grid);
    if (item + grid < items) load(item + grid, 1 - stage, next_length);
    cp_async_commit();
    cp_async_wait<1>();
    body(item, stage, length);
    length = next_length;
    next_length = clamp_length(p, given_after_next);
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
}

// Copies rows [0, valid_rows) of a [kTile, D] tile (global rows `stride` elements apart) into
// shared memory and zeroes the rest, so rows past a length (padding, which may hold anything, even
// NaN) never reach an MMA. Vectorised: cp.async, completed by cp_async_wait + a barrier; otherwise
// plain element copies, complete at the barrier.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* smem, const T* gmem, int64_t stride, int valid_rows,
                                          bool vectorized) {
  if (vectorized) {
    constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
#pragma unroll
    for (int i = 0; i < kTile * kChunksPerRow / kThreads; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * kThreads;
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const bool valid = row < valid_rows;
      cp_async16(smem + row * kRowStride<D> + col, valid ? gmem + row * stride + col : gmem, valid);
    }
  } else {
    for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
      const int row = e / D, col = e % D;
      smem[row * kRowStride<D> + col] =
          row < valid_rows ? gmem[row * stride + col] : zero_value<T>();
    }
  }
}

// Writes rows [0, rows) of a [16, D] warp tile from shared memory to global memory; called by
// one warp after __syncwarp.
template <typename T, int D>
__device__ __forceinline__ void store_warp_rows(T* gmem, int64_t stride, const T* smem, int rows,
                                                bool vectorized, int lane) {
  if (vectorized) {
    constexpr int kChunksPerRow = D * static_cast<int>(sizeof(T)) / 16;
#pragma unroll
    for (int i = 0; i < 16 * kChunksPerRow / 32; ++i) {
      const int c = lane + i * 32;
      const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      if (row < rows)
        *reinterpret_cast<uint4*>(gmem + row * stride + col) =
            *reinterpret_cast<const uint4*>(smem + row * kRowStride<D> + col);
    }
  } else {
    for (int e = lane; e < 16 * D; e += 32) {
      const int row = e / D, col = e % D;
      if (row < rows) gmem[row * stride + col] = smem[row * kRowStride<D> + col];
    }
  }
}

// Accumulator tiles [D/8][4] of a warp's 16 rows (times `factor`) into its smem rows, as T.
template <typename T, int D>
__device__ __forceinline__ void stage_accumulators(T* smem_rows, const float (&acc)[D / 8][4],
                                                   float factor, int lane) {
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = n * 8 + 2 * t4;
    *reinterpret_cast<uint32_t*>(smem_rows + g * kRowStride<D> + col) =
        pack2<T>(acc[n][0] * factor, acc[n][1] * factor);
    *reinterpret_cast<uint32_t*>(smem_rows + (g + 8) * kRowStride<D> + col) =
        pack2<T>(acc[n][2] * factor, acc[n][3] * factor);
  }
}

// The online softmax of one key tile for a warp's kRowTiles x 16 queries (the first is query0):
// the scores s (keys n0..n0+63 in accumulator layout) are masked at and past `length` and, when
// causal, after the query; the running max and this thread's share of the row sums are updated
// and o rescaled; s becomes the unnormalised probabilities, zeroed where the dropout mask of the
// warp's rows (warp_keep, rows kMaskStride bytes apart) drops them.
template <int D, int kRowTiles>
__device__ __forceinline__ void softmax_key_tile(const Params& p, float (&s)[kRowTiles][8][4],
                                                 float (&o)[kRowTiles][D / 8][4],
                                                 float (&row_max)[kRowTiles][2],
                                                 float (&row_sum)[kRowTiles][2],
                                                 const uint8_t* warp_keep, int n0, int length,
                                                 int query0, int lane) {
  const int g = lane / 4, t4 = lane % 4;
  // Masks only where the tile crosses the length or (for this warp) the diagonal.
  if (n0 + kTile > length || (p.causal && n0 + kTile - 1 > query0)) {
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nt * 8 + 2 * t4 + (e & 1);
          const int query = query0 + mt * 16 + g + (e / 2) * 8;
          if (key >= length || (p.causal && key > query)) s[mt][nt][e] = -INFINITY;
        }
  }
  // Online softmax in base 2: p = 2^(s * scale * log2e - max * scale * log2e).
#pragma unroll
  for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float new_max = fmaxf(row_max[mt][r], tile_max);
      // A row with nothing visible yet keeps max -inf: subtract 0 so exp2 gives 0, not NaN.
      const float base = new_max == -INFINITY ? 0.0f : new_max * p.scale_log2;
      const float alpha = fast_exp2(row_max[mt][r] * p.scale_log2 - base);
      row_max[mt][r] = new_max;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float e = fast_exp2(fmaf(s[mt][nt][2 * r + c], p.scale_log2, -base));
          s[mt][nt][2 * r + c] = e;
          sum += e;
        }
      row_sum[mt][r] = row_sum[mt][r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[mt][dt][2 * r] *= alpha;
        o[mt][dt][2 * r + 1] *= alpha;
      }
    }
  // Dropout after the sum: the softmax is normalised before dropout. 1/(1-p) comes at the end.
  if (p.dropout_p > 0.0f) {
#pragma unroll
    for (int mt = 0; mt < kRowTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = mt * 16 + g + (e / 2) * 8, c = nt * 8 + 2 * t4 + (e & 1);
          if (!warp_keep[r * kMaskStride + c]) s[mt][nt][e] = 0.0f;
        }
  }
}

// Normalises a warp's 16 output rows in place (accumulators o; running max and this thread's
// share of the row sums for rows g and g + 8; the dropout scale 1/(1-p) included) and hands the
// log-sum-exp of each to store_lse(row within the warp, value) (lanes 4g).
template <int D, typename StoreLse>
__device__ __forceinline__ void normalise_rows_to(float (&o)[D / 8][4], const float (&row_max)[2],
                                                  const float (&row_sum)[2], const Params& p,
                                                  int lane, StoreLse&& store_lse) {
  float lse_rows[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float factor = sum > 0.0f ? p.keep_scale / sum : 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][2 * r] *= factor;
      o[dt][2 * r + 1] *= factor;
    }
    lse_rows[r] = sum > 0.0f ? row_max[r] * p.scale + logf(sum) : -INFINITY;
  }
  const int g = lane / 4;
  if (lane % 4 == 0) {
    store_lse(g, lse_rows[0]);
    store_lse(g + 8, lse_rows[1]);
  }
}
// normalise_rows_to with the warp's row r's lse going to lse[r] for r < rows.
template <int D>
__device__ __forceinline__ void normalise_rows(float (&o)[D / 8][4], const float (&row_max)[2],
                                               const float (&row_sum)[2], const Params& p,
                                               float* lse, int rows, int lane) {
  normalise_rows_to<D>(o, row_max, row_sum, p, lane, [&](int r, float value) {
    if (r < rows) lse[r] = value;
  });
}

// normalise_rows, then the rows staged in the warp's 16 rows `staged` of a padded shared tile and
// written to out (the warp's first row; 16-byte chunks where p.vector_io).
template <typename T, int D>
__device__ __forceinline__ void write_output_rows(float (&o)[D / 8][4], const float (&row_max)[2],
                                                  const float (&row_sum)[2], const Params& p,
                                                  T* staged, T* out, float* lse, int rows,
                                                  int lane) {
  normalise_rows<D>(o, row_max, row_sum, p, lse, rows, lane);
  stage_accumulators<T, D>(staged, o, 1.0f, lane);
  __syncwarp();
  if (rows > 0) store_warp_rows<T, D>(out, p.out_stride, staged, rows, p.vector_io, lane);
}

// Zeroes rows [0, rows) of a [rows, D] block (head columns only); called by the whole block.
template <typename T, int D>
__device__ __forceinline__ void zero_rows(T* gmem, int64_t stride, int rows) {
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x)
    gmem[static_cast<int64_t>(e / D) * stride + e % D] = zero_value<T>();
}

// keep[r * kMaskStride + c] = dropout_keep(key, first + r * row_step + c, p) for the kTile x kTile
// tile whose element (0, 0) is `first` (rows row_step apart), by kThreads cooperating threads of
// which this is `thread`, eight elements per Philox call as dropout_uniform draws them; a barrier
// over those threads must follow before use. Where every row starts at a multiple of 8 (first and
// row_step multiples of 8: kv_len % 8 == 0), a row is 8 whole blocks and each block's 8 bytes go
// out in one store; otherwise a row may straddle 9 blocks and each byte is tested for its row.
// `rows` and `cols` (at most kTile) bound what is drawn: the first `rows` rows, and in them the
// columns below `cols` (the short kernels' q_len x kv_len of a sentence); the rest of the tile
// keeps what it held, so only entries a caller masks out may lie there.
__device__ __forceinline__ void fill_dropout_part(uint8_t* keep, const RngKey& key, float p,
                                                  uint64_t first, uint64_t row_step, int thread,
                                                  int rows, int cols) {
  constexpr int kE = kDropoutBlockElements;
  static_assert(kTile % kE == 0 && kMaskStride % 8 == 0, "whole blocks, 8-byte aligned rows");
  // Whole blocks only where cols is a multiple of 8 too: rounded up, a packed sentence's columns
  // would reach into the next sentence's block (short_pack.cuh).
  if (first % kE == 0 && row_step % kE == 0 && cols % kE == 0) {
    const int blocks_per_row = cols / kE;
    for (int w = thread; w < rows * blocks_per_row; w += kThreads) {
      const int r = w / blocks_per_row, c = w % blocks_per_row;
      const Philox4 draw = philox_block(key, (first + r * row_step) / kE + c);
      uint32_t bytes[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t word = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = 4 * half + j;
          word |= (dropout_half_uniform(draw.v[e / 2], e % 2) >= p ? 1u : 0u) << (8 * j);
        }
        bytes[half] = word;
      }
      *reinterpret_cast<uint2*>(keep + r * kMaskStride + c * kE) = make_uint2(bytes[0], bytes[1]);
    }
    return;
  }
  const int blocks_per_row = (cols + kE - 1) / kE + 1;  // a row of cols may straddle one more
  for (int w = thread; w < rows * blocks_per_row; w += kThreads) {
    const int r = w / blocks_per_row;
    const uint64_t row_first = first + r * row_step;
    const uint64_t block = row_first / kE + w % blocks_per_row;
    if (block * kE >= row_first + cols) continue;
    const Philox4 draw = philox_block(key, block);
#pragma unroll
    for (int j = 0; j < kE; ++j) {
      const uint64_t e = block * kE + j;
      if (e >= row_first && e < row_first + cols)
        keep[r * kMaskStride + static_cast<int>(e - row_first)] =
            dropout_half_uniform(draw.v[j / 2], j % 2) >= p;
    }
  }
}

// The same, filled by the kThreads threads of the block.
__device__ __forceinline__ void fill_dropout_tile(uint8_t* keep, const RngKey& key, float p,
                                                  uint64_t first, uint64_t row_step, int thread) {
  fill_dropout_part(keep, key, p, first, row_step, thread, kTile, kTile);
}
__device__ __forceinline__ void fill_dropout_tile(uint8_t* keep, const RngKey& key, float p,
                                                  uint64_t first, uint64_t row_step) {
  fill_dropout_part(keep, key, p, first, row_step, static_cast<int>(threadIdx.x), kTile, kTile);
}

}  // namespace nmt::cuda::flash
