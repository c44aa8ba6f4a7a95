// Fused attention backward for kv_len > 64 on Hopper (sm_90a): the dQ and dK/dV kernels of
// backward_dq.cu / backward.cu rewritten with warpgroup MMAs
// (kernels/cuda/wgmma.cuh), deterministic as they are (no atomics, one fixed summation order).
//   1. dQ, per 64 queries of a warpgroup, looping over 64-key tiles: delta = rowsum(dO * O) of its
//      queries (stored for step 2; no separate delta kernel), S = Q Kᵀ and dP = dO Vᵀ issued
//      together, P from the saved lse, dS = P (dP Z - delta), dQ += dS K.
//   2. dK/dV, per 64 keys of a warpgroup, looping over 64-query tiles: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
//      issued together, Pᵀ, dV += (P Z)ᵀ dO (runs while dSᵀ is computed), dK += dSᵀ Q (runs while
//      the next tile's barrier and copies are issued).
// The accumulators have the mma.sync fragment layout, so the masking, dropout and packing code is
// that of the mma.sync kernels. Streamed tiles go through 4 cp.async stages of 128B-swizzled
// blocks, two tiles ahead. S and dP read both operands from shared memory: fragments of Q / dO
// held in registers across the key loop (an RS product) were overwritten by ptxas (CUDA 13.0),
// which gave dS the same registers; reading them each tile costs the same shared-memory traffic.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/flash_attention/traits_backward_wgmma.h"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {
namespace {

__device__ __forceinline__ void group_barrier(int group) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(group + 1), "n"(kGroupThreads) : "memory");
}

// Packs accumulator chunks 2 kq, 2 kq + 1 (times the dropout factor) into the A fragment of
// k16 step kq: the rows stay, the 16 columns become the product's K.
template <typename T, typename Z>
__device__ __forceinline__ void pack_fragments(uint32_t (&a)[4][4], const float (&acc)[8][4],
                                               Z&& factor) {
#pragma unroll
  for (int kq = 0; kq < 4; ++kq)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int nt = 2 * kq + i / 2, e = (i % 2) * 2;
      a[kq][i] = pack2<T>(acc[nt][e] * factor(nt, e), acc[nt][e + 1] * factor(nt, e + 1));
    }
}

// dK, dV of kGroups * 64 keys (grid: x the (sentence, head) pair, y the key block); each warpgroup
// owns 64 keys and all groups share the streamed Q / dO tiles.
template <typename T, int D, bool kDropout, int kGroups>
__global__ void __launch_bounds__(kGroups* kGroupThreads, 2 / kGroups)
    dkdv_wgmma_kernel(const Params p) {
  constexpr int kBlockThreads = kGroups * kGroupThreads;
  constexpr int kWideTile = kGroups * kTile;  // keys per block
  constexpr int kBlocks = D / 64;
  extern __shared__ unsigned char smem_raw[];
  T* s_k = reinterpret_cast<T*>(wgmma::align_to_swizzle(smem_raw));  // [group][64][D] swizzled
  T* s_v = s_k + kGroups * kSwizzledTile<D>;                         // [group][64][D]
  T* s_q = s_v + kGroups * kSwizzledTile<D>;                         // [stage][64][D]
  T* s_do = s_q + kStages * kSwizzledTile<D>;                        // [stage][64][D]
  float* s_lse = reinterpret_cast<float*>(s_do + kStages * kSwizzledTile<D>);  // [stage][64]
  float* s_delta = s_lse + kStages * kTile;                                    // [stage][64]
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_delta + kStages * kTile);     // [group][q][key]

  const int tid = threadIdx.x, group = tid / kGroupThreads, group_thread = tid % kGroupThreads;
  const int warp = group_thread / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int n0 = blockIdx.y * kWideTile;
  const int length = clamped_length(p, b);
  const int key_rows = min(kWideTile, length - n0);  // keys of the block inside the length
  const int kv_rows = min(kWideTile, p.kv_len - n0);
  const int first_q_tile = p.causal ? n0 / kTile : 0;  // earlier queries see none of these keys
  const int q_tiles = (p.q_len + kTile - 1) / kTile;
  const int64_t kv_row0 = static_cast<int64_t>(b) * p.kv_len + n0;
  T* dk = static_cast<T*>(p.dk) + kv_row0 * p.dk_stride + h * D;
  T* dv = static_cast<T*>(p.dv) + kv_row0 * p.dv_stride + h * D;
  if (key_rows <= 0 || first_q_tile >= q_tiles) {  // no query sees these keys: zero gradients
    zero_rows<T, D>(dk, p.dk_stride, kv_rows);
    zero_rows<T, D>(dv, p.dv_stride, kv_rows);
    return;
  }
  const int tiles = q_tiles - first_q_tile;
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(b) * p.q_len * p.q_stride + h * D;
  const T* d_out =
      static_cast<const T*>(p.d_out) + static_cast<int64_t>(b) * p.q_len * p.d_out_stride + h * D;
  const float* lse = p.lse + static_cast<int64_t>(bh) * p.q_len;
  const float* delta = p.delta + static_cast<int64_t>(bh) * p.q_len;

  auto load_query_tile = [&](int i) {  // query tile first_q_tile + i into stage i % kStages
    const int m = (first_q_tile + i) * kTile, rows = min(kTile, p.q_len - m);
    const int stage = i % kStages;
    wgmma::load_swizzled<T, D, kBlockThreads>(s_q + stage * kSwizzledTile<D>, q + m * p.q_stride,
                                              p.q_stride, rows, tid);
    wgmma::load_swizzled<T, D, kBlockThreads>(
        s_do + stage * kSwizzledTile<D>, d_out + m * p.d_out_stride, p.d_out_stride, rows, tid);
  };
  // lse and delta of a tile's queries: read into registers when the tile's copies are issued and
  // stored to its stage at the next advance, so the global load latency hides behind the work.
  float pending_lse = 0.0f, pending_delta = 0.0f;
  auto fetch_rows = [&](int i) {
    if (tid < kTile) {
      const int t = (first_q_tile + i) * kTile + tid;
      pending_lse = t < p.q_len ? lse[t] : -INFINITY;
      pending_delta = t < p.q_len ? delta[t] : 0.0f;
    }
  };
  auto stash_rows = [&](int i) {
    if (tid < kTile) {
      // +inf for rows past q_len and for queries with no visible key (lse -inf): P = 0 there.
      s_lse[(i % kStages) * kTile + tid] =
          pending_lse == -INFINITY ? INFINITY : pending_lse * kLog2e;
      s_delta[(i % kStages) * kTile + tid] = pending_delta;
    }
  };
  const T* k = static_cast<const T*>(p.k) + kv_row0 * p.k_stride + h * D;
  const T* v = static_cast<const T*>(p.v) + kv_row0 * p.v_stride + h * D;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    wgmma::load_swizzled<T, D, kBlockThreads>(s_k + i * kSwizzledTile<D>,
                                              k + i * kTile * p.k_stride, p.k_stride,
                                              key_rows - i * kTile, tid);
    wgmma::load_swizzled<T, D, kBlockThreads>(s_v + i * kSwizzledTile<D>,
                                              v + i * kTile * p.v_stride, p.v_stride,
                                              key_rows - i * kTile, tid);
  }
  load_query_tile(0);
  fetch_rows(0);
  stash_rows(0);
  cp_async_commit();
  if (tiles > 1) {
    load_query_tile(1);
    fetch_rows(1);
  }
  cp_async_commit();
  // Makes tile t usable by every group and starts the copies of tile t + 2. Its stage, and that of
  // the lse rows stored here, held a tile whose products every group has finished.
  auto advance = [&](int t) {
    if (t + 1 < tiles) stash_rows(t + 1);
    cp_async_wait<kPrefetch - 1>();  // tile t's copies have landed
    wgmma::fence_async_proxy();
    __syncthreads();
    if (t + kPrefetch < tiles) {
      load_query_tile(t + kPrefetch);
      fetch_rows(t + kPrefetch);
    }
    cp_async_commit();
  };
  advance(0);

  const int group_key0 = n0 + group * kTile;    // the group's first key
  const int key0 = group_key0 + warp * 16 + g;  // key of accumulator elements 0, 1; +8 for 2, 3
  const T* k_tile = s_k + group * kSwizzledTile<D>;
  const T* v_tile = s_v + group * kSwizzledTile<D>;
  uint8_t* keep = s_keep + group * kTile * kMaskStride;
  float dk_acc[kBlocks][8][4] = {}, dv_acc[kBlocks][8][4] = {};

  for (int i = 0; i < tiles; ++i) {
    const int stage = i % kStages, m0 = (first_q_tile + i) * kTile;
    // Groups whose keys all lie past the length or after the tile's last query skip the tile.
    const bool active = group_key0 < length && !(p.causal && group_key0 > m0 + kTile - 1);
    if (active) {
      if constexpr (kDropout) {
        fill_dropout_tile(keep, p.key, p.dropout_p,
                          (static_cast<uint64_t>(bh) * p.q_len + m0) * p.kv_len + group_key0,
                          p.kv_len, group_thread);
        group_barrier(group);
      }
      const T* q_tile = s_q + stage * kSwizzledTile<D>;
      const T* do_tile = s_do + stage * kSwizzledTile<D>;
      const float* tile_lse = s_lse + stage * kTile;
      const float* tile_delta = s_delta + stage * kTile;

      // Sᵀ = k qᵀ and dPᵀ = v dOᵀ: rows the group's 64 keys, columns the tile's 64 queries.
      float st[8][4], dpt[8][4];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::mma_ss<T>(st, wgmma::desc_k_major_tile(k_tile, kk),
                         wgmma::desc_k_major_tile(q_tile, kk), kk > 0);
      wgmma::commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::mma_ss<T>(dpt, wgmma::desc_k_major_tile(v_tile, kk),
                         wgmma::desc_k_major_tile(do_tile, kk), kk > 0);
      wgmma::commit();
      wgmma::wait<1>();
      wgmma::hold(st);

      // Pᵀ from the saved lse; masked keys (past the length, or after the query) get 0.
      const int warp_key0 = group_key0 + warp * 16;
      const bool masked = warp_key0 + 16 > length || (p.causal && warp_key0 + 15 > m0);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(tile_lse + 8 * j + 2 * t4);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[j][e] = fast_exp2(fmaf(st[j][e], p.scale_log2, -((e & 1) ? l2.y : l2.x)));
      }
      if (masked) {  // warp-uniform; most tiles of long sequences need no mask
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int query = m0 + 8 * j + 2 * t4 + (e & 1), key = key0 + (e / 2) * 8;
            if (key >= length || (p.causal && key > query)) st[j][e] = 0.0f;
          }
      }
      // The dropout factor Z of accumulator element (j, e).
      auto keep_factor = [&](int j, int e) {
        if constexpr (!kDropout) return 1.0f;
        const int query = 8 * j + 2 * t4 + (e & 1), key = warp * 16 + g + (e / 2) * 8;
        return keep[query * kMaskStride + key] ? p.keep_scale : 0.0f;
      };
      // dV += (P * Z)ᵀ dO.
      uint32_t pa[4][4];
      pack_fragments<T>(pa, st, keep_factor);
      wgmma::fence();
#pragma unroll
      for (int kq = 0; kq < 4; ++kq)
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk)
          wgmma::mma_rs<T, true>(dv_acc[blk], pa[kq], wgmma::desc_mn_major_tile(do_tile, blk, kq),
                                 true);
      wgmma::commit();
      wgmma::wait<1>();  // dPᵀ done; dV may still run
      wgmma::hold(dpt);

      // dSᵀ = P * (dP * Z - delta) in place, then dK += dSᵀ q (1/sqrt(dh) applied at the end).
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 d2 = *reinterpret_cast<const float2*>(tile_delta + 8 * j + 2 * t4);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dpt[j][e] = st[j][e] * (dpt[j][e] * keep_factor(j, e) - ((e & 1) ? d2.y : d2.x));
      }
      uint32_t dsa[4][4];
      pack_fragments<T>(dsa, dpt, [](int, int) { return 1.0f; });
      wgmma::fence();
#pragma unroll
      for (int kq = 0; kq < 4; ++kq)
#pragma unroll
        for (int blk = 0; blk < kBlocks; ++blk)
          wgmma::mma_rs<T, true>(dk_acc[blk], dsa[kq], wgmma::desc_mn_major_tile(q_tile, blk, kq),
                                 true);
      wgmma::commit();
    }
    // The next tile's barrier and copies are issued while dK runs.
    if (i + 1 < tiles) advance(i + 1);
    wgmma::wait<0>();  // the stage and the fragments are free again
  }
#pragma unroll
  for (int blk = 0; blk < kBlocks; ++blk) {
    wgmma::hold(dk_acc[blk]);
    wgmma::hold(dv_acc[blk]);
  }

  // Stage in the group's own K / V tiles (only this group's products read them, all complete).
  T* dk_tile = s_k + group * kSwizzledTile<D>;
  T* dv_tile = s_v + group * kSwizzledTile<D>;
  wgmma::stage_rows<T, D / 8>(dk_tile, reinterpret_cast<float(&)[D / 8][4]>(dk_acc), p.scale, warp,
                              lane);
  wgmma::stage_rows<T, D / 8>(dv_tile, reinterpret_cast<float(&)[D / 8][4]>(dv_acc), 1.0f, warp,
                              lane);
  __syncwarp();
  const int group_row0 = group * kTile;
  wgmma::store_rows<T, D>(dk + group_row0 * p.dk_stride, p.dk_stride, dk_tile, kv_rows - group_row0,
                          warp, lane);
  wgmma::store_rows<T, D>(dv + group_row0 * p.dv_stride, p.dv_stride, dv_tile, kv_rows - group_row0,
                          warp, lane);
}

// dQ and delta of kGroups * 64 queries (grid: x the (sentence, head) pair, y the query block,
// longest causal blocks first); each warpgroup owns 64 queries and all share the K / V tiles.
template <typename T, int D, bool kDropout, int kGroups>
__global__ void __launch_bounds__(kGroups* kGroupThreads, 2 / kGroups)
    dq_wgmma_kernel(const Params p) {
  constexpr int kBlockThreads = kGroups * kGroupThreads;
  constexpr int kWideTile = kGroups * kTile;  // queries per block
  constexpr int kBlocks = D / 64;
  extern __shared__ unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(wgmma::align_to_swizzle(smem_raw));  // [group][64][D] swizzled
  T* s_do = s_q + kGroups * kSwizzledTile<D>;                        // [group][64][D]
  T* s_k = s_do + kGroups * kSwizzledTile<D>;                        // [stage][64][D]
  T* s_v = s_k + kStages * kSwizzledTile<D>;                         // [stage][64][D]
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_v + kStages * kSwizzledTile<D>);  // [group][q][k]

  const int tid = threadIdx.x, group = tid / kGroupThreads, group_thread = tid % kGroupThreads;
  const int warp = group_thread / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int m0 = (gridDim.y - 1 - blockIdx.y) * kWideTile;  // longest (causal) blocks first
  const int length = clamped_length(p, b);
  const int key_end = p.causal ? min(length, m0 + kWideTile) : length;
  const int key_tiles = (key_end + kTile - 1) / kTile;
  const int q_rows = min(kWideTile, p.q_len - m0);
  const int64_t q_row0 = static_cast<int64_t>(b) * p.q_len + m0;
  T* dq = static_cast<T*>(p.dq) + q_row0 * p.dq_stride + h * D;
  const int group_q0 = m0 + group * kTile;    // the group's first query
  const int row0 = group_q0 + warp * 16 + g;  // query of accumulator elements 0, 1; +8 for 2, 3

  // delta = rowsum(dO * O) of the thread's two queries, also stored to p.delta for the dK/dV
  // kernel launched after this one. The 4 threads of a quad share a query, D / 4 columns each;
  // a fixed order, and the butterfly gives all four the same bits.
  float delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    float sum = 0.0f;
    if (t < p.q_len) {
      const int64_t row = static_cast<int64_t>(b) * p.q_len + t;
      const T* o = static_cast<const T*>(p.out) + row * p.out_stride + h * D + t4 * (D / 4);
      const T* d = static_cast<const T*>(p.d_out) + row * p.d_out_stride + h * D + t4 * (D / 4);
#pragma unroll
      for (int c = 0; c < D / 4; c += 8) {
        const uint4 o8 = *reinterpret_cast<const uint4*>(o + c);
        const uint4 d8 = *reinterpret_cast<const uint4*>(d + c);
        const auto* o2 = reinterpret_cast<const typename Vec2<T>::type*>(&o8);
        const auto* d2 = reinterpret_cast<const typename Vec2<T>::type*>(&d8);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 of = to_float2(o2[i]), df = to_float2(d2[i]);
          sum = fmaf(of.y, df.y, fmaf(of.x, df.x, sum));
        }
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    delta[r] = sum;
    if (t4 == 0 && t < p.q_len) p.delta[static_cast<int64_t>(bh) * p.q_len + t] = sum;
  }
  if (key_tiles == 0) {
    zero_rows<T, D>(dq, p.dq_stride, q_rows);
    return;
  }
  const T* k = static_cast<const T*>(p.k) + static_cast<int64_t>(b) * p.kv_len * p.k_stride + h * D;
  const T* v = static_cast<const T*>(p.v) + static_cast<int64_t>(b) * p.kv_len * p.v_stride + h * D;
  auto load_key_tile = [&](int j) {
    const int n = j * kTile, stage = j % kStages;
    wgmma::load_swizzled<T, D, kBlockThreads>(s_k + stage * kSwizzledTile<D>, k + n * p.k_stride,
                                              p.k_stride, length - n, tid);
    wgmma::load_swizzled<T, D, kBlockThreads>(s_v + stage * kSwizzledTile<D>, v + n * p.v_stride,
                                              p.v_stride, length - n, tid);
  };
  const T* q = static_cast<const T*>(p.q) + q_row0 * p.q_stride + h * D;
  const T* d_out = static_cast<const T*>(p.d_out) + q_row0 * p.d_out_stride + h * D;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    wgmma::load_swizzled<T, D, kBlockThreads>(s_q + i * kSwizzledTile<D>,
                                              q + i * kTile * p.q_stride, p.q_stride,
                                              q_rows - i * kTile, tid);
    wgmma::load_swizzled<T, D, kBlockThreads>(s_do + i * kSwizzledTile<D>,
                                              d_out + i * kTile * p.d_out_stride, p.d_out_stride,
                                              q_rows - i * kTile, tid);
  }
  load_key_tile(0);
  cp_async_commit();
  if (key_tiles > 1) load_key_tile(1);
  cp_async_commit();
  // Makes key tile t usable by every group and starts the copies of tile t + 2 into a stage whose
  // products every group has finished.
  auto advance = [&](int t) {
    cp_async_wait<kPrefetch - 1>();  // tile t's copies have landed
    wgmma::fence_async_proxy();
    __syncthreads();
    if (t + kPrefetch < key_tiles) load_key_tile(t + kPrefetch);
    cp_async_commit();
  };
  advance(0);

  // Keys the group's queries see: tiles from there on are skipped by this group.
  const int group_key_end =
      group_q0 >= p.q_len ? 0 : (p.causal ? min(length, group_q0 + kTile) : length);
  float lse_log2[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row0 + 8 * r;
    const float l = t < p.q_len ? p.lse[static_cast<int64_t>(bh) * p.q_len + t] : -INFINITY;
    lse_log2[r] = l == -INFINITY ? INFINITY : l * kLog2e;  // no visible key: P = 0
  }
  const T* q_tile = s_q + group * kSwizzledTile<D>;
  const T* do_tile = s_do + group * kSwizzledTile<D>;
  uint8_t* keep = s_keep + group * kTile * kMaskStride;
  float dq_acc[kBlocks][8][4] = {};

  // S, P, dP, dS of key tile n0 (in `stage`) for the group's queries; issues dQ += dS k.
  auto compute_tile = [&](int stage, int n0) {
    if constexpr (kDropout) {
      fill_dropout_tile(keep, p.key, p.dropout_p,
                        (static_cast<uint64_t>(bh) * p.q_len + group_q0) * p.kv_len + n0, p.kv_len,
                        group_thread);
      group_barrier(group);
    }
    const T* k_tile = s_k + stage * kSwizzledTile<D>;
    const T* v_tile = s_v + stage * kSwizzledTile<D>;

    // S = q kᵀ and dP = dO vᵀ: rows the group's 64 queries, columns the tile's 64 keys.
    float s[8][4], ds[8][4];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<T>(s, wgmma::desc_k_major_tile(q_tile, kk),
                       wgmma::desc_k_major_tile(k_tile, kk), kk > 0);
    }
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<T>(ds, wgmma::desc_k_major_tile(do_tile, kk),
                       wgmma::desc_k_major_tile(v_tile, kk), kk > 0);
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::hold(s);
    const bool masked = n0 + kTile > length || (p.causal && n0 + kTile - 1 > group_q0 + warp * 16);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[nt][e] = fast_exp2(fmaf(s[nt][e], p.scale_log2, -lse_log2[e / 2]));
    if (masked) {  // warp-uniform; most tiles of long sequences need no mask
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nt * 8 + 2 * t4 + (e & 1), query = row0 + 8 * (e / 2);
          if (key >= length || (p.causal && key > query)) s[nt][e] = 0.0f;
        }
    }
    wgmma::wait<0>();
    wgmma::hold(ds);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        float z = 1.0f;
        if constexpr (kDropout)
          z = keep[(warp * 16 + g + 8 * r) * kMaskStride + nt * 8 + 2 * t4 + (e & 1)] ? p.keep_scale
                                                                                      : 0.0f;
        ds[nt][e] = s[nt][e] * (ds[nt][e] * z - delta[r]);
      }
    // dQ += dS k (scaled by 1/sqrt(dh) at the end).
    uint32_t dsa[4][4];
    pack_fragments<T>(dsa, ds, [](int, int) { return 1.0f; });
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int blk = 0; blk < kBlocks; ++blk)
        wgmma::mma_rs<T, true>(dq_acc[blk], dsa[kk], wgmma::desc_mn_major_tile(k_tile, blk, kk),
                               true);
    wgmma::commit();
  };

  for (int j = 0; j < key_tiles; ++j) {
    const int stage = j % kStages, n0 = j * kTile;
    // Tiles past the keys the group's queries see are skipped (uniform per group).
    if (n0 < group_key_end) compute_tile(stage, n0);
    // The next tile's barrier and copies are issued while dQ runs.
    if (j + 1 < key_tiles) advance(j + 1);
    wgmma::wait<0>();  // the stage and the fragments are free again
  }
#pragma unroll
  for (int blk = 0; blk < kBlocks; ++blk) wgmma::hold(dq_acc[blk]);

  // Stage in the group's own Q tile (no product reads it any more).
  T* dq_tile = s_q + group * kSwizzledTile<D>;
  wgmma::stage_rows<T, D / 8>(dq_tile, reinterpret_cast<float(&)[D / 8][4]>(dq_acc), p.scale, warp,
                              lane);
  __syncwarp();
  const int group_row0 = group * kTile;
  wgmma::store_rows<T, D>(dq + group_row0 * p.dq_stride, p.dq_stride, dq_tile, q_rows - group_row0,
                          warp, lane);
}

template <typename T, int D, bool kDropout>
void launch_dkdv(const Params& p, cudaStream_t stream) {
  constexpr int kGroups = kGroupsFor<D>;
  const size_t smem = 1024 + (2 * kGroups + 2 * kStages) * kTileBytes<T, D> +
                      2 * kStages * kTile * sizeof(float) + kGroups * kTile * kMaskStride;
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(dkdv_wgmma_kernel<T, D, kDropout, kGroups>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads),
                  static_cast<unsigned>((p.kv_len + kGroups * kTile - 1) / (kGroups * kTile)));
  dkdv_wgmma_kernel<T, D, kDropout, kGroups><<<grid, kGroups * kGroupThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <typename T, int D, bool kDropout>
void launch_dq(const Params& p, cudaStream_t stream) {
  constexpr int kGroups = kGroupsFor<D>;
  const size_t smem =
      1024 + (2 * kGroups + 2 * kStages) * kTileBytes<T, D> + kGroups * kTile * kMaskStride;
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(dq_wgmma_kernel<T, D, kDropout, kGroups>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(p.batch * p.heads),
                  static_cast<unsigned>((p.q_len + kGroups * kTile - 1) / (kGroups * kTile)));
  dq_wgmma_kernel<T, D, kDropout, kGroups><<<grid, kGroups * kGroupThreads, smem, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_backward_dkdv_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream) {
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    using T = typename decltype(type_tag)::type;
    constexpr int D = decltype(dim_tag)::value;
    if (p.dropout_p > 0.0f)
      launch_dkdv<T, D, true>(p, stream);
    else
      launch_dkdv<T, D, false>(p, stream);
  });
}

void launch_backward_dq_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream) {
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    using T = typename decltype(type_tag)::type;
    constexpr int D = decltype(dim_tag)::value;
    if (p.dropout_p > 0.0f)
      launch_dq<T, D, true>(p, stream);
    else
      launch_dq<T, D, false>(p, stream);
  });
}

}  // namespace nmt::cuda::flash
