// Fused attention for short sentences (q_len and kv_len <= 64, the NMT case) on Hopper: the
// persistent short kernels of forward.cu / _backward_short.cu with the products
// on wgmma (kernels/cuda/wgmma.cuh) instead of mma.sync. One warpgroup per block; a block walks
// (sentence, head) items, loading the next item's tiles (swizzled, cp.async) into the second
// shared-memory stage while it computes the current one. A whole item is one 64x64 tile, so the
// forward needs no online rescaling and the backward block owns complete dQ rows (dSᵀ goes
// through shared memory, delta is summed from the P and dP registers). Deterministic: no atomics.
// With dropout and p.keep_bits, the forward also stores its keep mask as bits (64 a query row) and
// the backward loads them with the item's tiles instead of drawing the Philox numbers again.
// Given bias gradients, the backward also sums the columns of the dQ, dK, dV tiles it has staged
// for their stores (one partial sum per sentence, head and column, on the tensor cores), and an
// ordered second pass (kernels/cuda/reduce.h) adds the sentences' partials to the bias gradients:
// at once, or at the flush of an active PartialSumDeferral (the same bits either way).
#include <optional>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/flash_attention/short_pack.cuh"
#include "kernels/cuda/flash_attention/traits_short_wgmma.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/env_switch.h"

namespace nmt::cuda::flash {
namespace {

// The A fragment of keys (or queries) 16kk..16kk+15 from the accumulator chunks 2kk, 2kk + 1.
template <typename T>
__device__ __forceinline__ void a_fragment(uint32_t (&a)[4], const float (&acc)[8][4], int kk) {
  a[0] = pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// Sums v (index 2nt + c: query 8nt + 2t4 + c of the accumulator layout) over the 8 lanes of the
// warp with the same t4 (lane bits 2-4), a reduce-scatter: each step hands the partner lane the
// half of v that it keeps and adds the half it receives, so lane 4g + t4 ends with the sums of
// indices 2g and 2g + 1 (queries 8g + 2t4, + 1) in v[0], v[1]. 14 shuffles; a fixed order.
template <int kHalf>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[16], int lane) {
  const bool upper = (lane & (2 * kHalf)) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float send = upper ? v[i] : v[i + kHalf];
    const float keep = upper ? v[i + kHalf] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2 * kHalf);
  }
}
__device__ __forceinline__ void reduce_scatter_rows(float (&v)[16], int lane) {
  reduce_scatter_step<8>(v, lane);  // lane bit 4
  reduce_scatter_step<4>(v, lane);  // lane bit 3
  reduce_scatter_step<2>(v, lane);  // lane bit 2
}

// Bit j of the result: the low bit of byte j of `bytes` (one 8-byte load and a multiply instead of
// 8 loads and tests). With the bytes masked to 0 or 1 the product is a sum of distinct powers of
// two (byte j's bit, at 2^(8j), times the constant's byte i, 2^(7 - i) at 2^(8i), lands at bit 8j
// + 7i + 7, a different bit for every pair), so nothing carries, and the top byte holds exactly
// the pairs i = 7 - j: byte j's bit at bit 56 + j.
__device__ __forceinline__ uint32_t gather_byte_bits(uint64_t bytes) {
  return static_cast<uint32_t>(((bytes & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
}

// Thread t of the block packs half t % 2 of keep-mask row t / 2 (32 bytes of 0 / 1) into one word,
// bit j for key 32 * (t % 2) + j (0 for keys past kv_len), and stores it for the item's query rows.
__device__ __forceinline__ void store_keep_bits(const uint8_t* keep, const Params& p, int item) {
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  if (row >= p.q_len) return;
  const uint64_t* bytes = reinterpret_cast<const uint64_t*>(keep + row * kMaskStride + half * 32);
  uint32_t word = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) word |= gather_byte_bits(bytes[k]) << (8 * k);
  // Keys past kv_len were not drawn (fill_dropout_part's cols): their bits are 0.
  const int valid = p.kv_len - 32 * half;
  word &= valid >= 32 ? ~0u : valid > 0 ? (1u << valid) - 1u : 0u;
  p.keep_bits[(static_cast<int64_t>(item) * p.q_len + row) * 2 + half] = word;
}

// store_keep_bits for a packed item: a row's word 0 holds its own sentence's keys (kv_len <= 32),
// taken from that sentence's diagonal block, and word 1 is 0; both go to the row's own (sentence,
// head) item.
__device__ __forceinline__ void store_pack_keep_bits(const uint8_t* keep, const PackTables& t,
                                                     const Params& p, int item) {
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  if (row >= pack_count(p, item) * p.q_len) return;
  uint32_t word = 0;
  if (half == 0) {
    const uint8_t* bytes = keep + row * kMaskStride + t.query_sentence[row] * p.kv_len;
    for (int j = 0; j < p.kv_len; ++j) word |= static_cast<uint32_t>(bytes[j] != 0) << j;
  }
  p.keep_bits[(pack_row_item(t, p, item, row) * p.q_len + t.query_position[row]) * 2 + half] = word;
}

// The inverse, from the staged words (rows past q_len were zero-filled): half t % 2 of row t / 2.
// For a packed item each thread staged its row's word 0 (its sentence's keys, kv_len <= 32), which
// goes to the columns of that sentence's diagonal block.
template <bool PACKED>
__device__ __forceinline__ void expand_keep_bits(uint8_t* keep, const uint32_t* words,
                                                 const PackTables& t, const Params& p) {
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  uint32_t word = words[threadIdx.x];
  if constexpr (PACKED) {
    const int sentence = t.query_sentence[row];
    const uint64_t shifted =
        sentence < 0 ? 0 : static_cast<uint64_t>(word) << (sentence * p.kv_len);
    word = static_cast<uint32_t>(half == 0 ? shifted : shifted >> 32);
  }
  uint32_t* bytes = reinterpret_cast<uint32_t*>(keep + row * kMaskStride + half * 32);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t nibble = word >> (4 * j);
    bytes[j] = (nibble & 1u) | ((nibble >> 1 & 1u) << 8) | ((nibble >> 2 & 1u) << 16) |
               ((nibble >> 3 & 1u) << 24);
  }
}

// The A fragment of k16 step kk of an indicator matrix whose row m (a sentence of the item, m <
// count) has 1 in the columns of tile rows m * len .. m * len + len - 1 and 0 elsewhere: the
// calling thread's rows g and g + 8 of its warp's 16, where only a warp with `owner` has ones
// (rows g + 8 never do: kMaxPack <= 8).
template <typename T>
__device__ __forceinline__ void sentence_indicator(uint32_t (&a)[4], int kk, int len, int count,
                                                   bool owner, int g, int t4) {
  const int lo = g * len, hi = owner && g < count ? lo + len : lo;  // [lo, hi) of tile rows
  auto one = [&](int row) { return row >= lo && row < hi ? 1.0f : 0.0f; };
  const int row = 16 * kk + 2 * t4;
  a[0] = pack2<T>(one(row), one(row + 1));
  a[1] = 0u;
  a[2] = pack2<T>(one(row + 8), one(row + 9));
  a[3] = 0u;
}

// Column sums of an item's staged dQ, dK, dV tiles ([64][64] swizzled) per sentence, into
// p.bias_partials[sentence][operand][head * 64 + column], on the tensor cores: one accumulator
// gets I_q dQ + I_k dK + I_v dV, where indicator I_o (sentence_indicator) is nonzero only in the
// rows of warp o, so warp o's rows 0..count-1 end up holding operand o's per-sentence sums (rows
// past a sentence's length are not counted). The products multiply the stored values by 1 and add
// them in f32 in the hardware's fixed order, so the sums are the stored gradients' and their bits
// never change. A walk down the columns through shared memory took about 1,000 instructions a
// thread an item, 30% of the backward's (session 19's ncu source counters). Called by the whole
// warpgroup once every warp's rows are staged and visible to the async proxy.
template <typename T>
__device__ __forceinline__ void store_bias_partials(const Params& p, const T* s_dq, const T* s_dk,
                                                    const T* s_dv, ItemSentences sentences,
                                                    int head) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const T* tiles[kBiasOperands] = {s_dq, s_dk, s_dv};
  // This warp's own indicator (warp 3 owns none), then zeros in the other operands' products.
  uint32_t mine[4][4], a[kBiasOperands][4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    sentence_indicator<T>(mine[kk], kk, warp == 0 ? p.q_len : p.kv_len, sentences.count,
                          warp < kBiasOperands, g, t4);
#pragma unroll
  for (int o = 0; o < kBiasOperands; ++o)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) a[o][kk][r] = warp == o ? mine[kk][r] : 0u;
  float sums[8][4];
  wgmma::fence();
#pragma unroll
  for (int o = 0; o < kBiasOperands; ++o)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma::mma_rs<T, true>(sums, a[o][kk], wgmma::desc_mn_major_tile(tiles[o], 0, kk),
                             o > 0 || kk > 0);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::hold(sums);
  if (warp >= kBiasOperands || g >= sentences.count) return;
  const int64_t width = static_cast<int64_t>(p.heads) * 64;  // one operand's bias columns
  float* partials = p.bias_partials +
                    (static_cast<int64_t>(sentences.first + g) * kBiasOperands + warp) * width +
                    head * 64 + 2 * t4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
    *reinterpret_cast<float2*>(partials + 8 * nt) = make_float2(sums[nt][0], sums[nt][1]);
}

// An item's dropout mask into the tile: only its q_len x kv_len entries (each packed sentence's in
// its diagonal block), not the whole tile: the rest is masked out (keys past the length, padded
// queries never stored), and a 32-token sentence draws 4 times fewer Philox blocks. `key` is p.key
// with its step read once a block (with_step_read): read at each item, the draws waited on that
// load (a quarter of the forward's stall samples at 128 x 64).
template <bool PACKED>
__device__ __forceinline__ void fill_item_dropout(uint8_t* keep, const Params& p, const RngKey& key,
                                                  int item) {
  if constexpr (PACKED)
    fill_pack_dropout(keep, p, key, item);
  else
    fill_dropout_part(keep, key, p.dropout_p, static_cast<uint64_t>(item) * p.q_len * p.kv_len,
                      p.kv_len, static_cast<int>(threadIdx.x), p.q_len, p.kv_len);
}

// PACKED: items of p.pack > 1 sentences (short_pack.cuh); otherwise one (sentence, head) each.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads) forward_short_wgmma_kernel(const Params p) {
  constexpr int kBlocks = D / 64;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = wgmma::align_to_swizzle(smem_raw);
  auto tile = [&](int stage, int operand) {  // [stage][q, k, v]
    return reinterpret_cast<T*>(smem + (3 * stage + operand) * kOperandBytes<D>);
  };
  uint8_t* s_keep = smem + 6 * kOperandBytes<D>;  // [query][key]
  PackTables& pack = *reinterpret_cast<PackTables*>(s_keep + kTile * kMaskStride);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const RngKey key = with_step_read(p.key);
  if constexpr (PACKED) fill_pack_rows(pack, p);  // with its barrier: the tables before any use
  auto load_item = [&](int item, int stage, int length) {
    const int h = item % p.heads;
    const ItemSentences s = item_sentences<PACKED>(p, item);
    const int64_t q_row0 = static_cast<int64_t>(s.first) * p.q_len;
    const int64_t kv_row0 = static_cast<int64_t>(s.first) * p.kv_len;
    wgmma::load_swizzled<T, D, kThreads>(tile(stage, 0),
                                         static_cast<const T*>(p.q) + q_row0 * p.q_stride + h * D,
                                         p.q_stride, s.count * p.q_len, threadIdx.x);
    // Key rows past a sentence's length are zeroed.
    const uint32_t key_rows = loaded_key_rows_valid<PACKED, D>(pack, p, s, length);
    auto key_valid = [&](int row) { return loaded_key_row_in<D>(key_rows, row); };
    wgmma::load_swizzled_rows<T, D, kThreads>(
        tile(stage, 1), static_cast<const T*>(p.k) + kv_row0 * p.k_stride + h * D, p.k_stride,
        key_valid, threadIdx.x);
    wgmma::load_swizzled_rows<T, D, kThreads>(
        tile(stage, 2), static_cast<const T*>(p.v) + kv_row0 * p.v_stride + h * D, p.v_stride,
        key_valid, threadIdx.x);
    if constexpr (PACKED) store_pack_lengths(pack, p, item, stage);
  };
  for_each_item_prefetched(p, load_item, [&](int item, int stage, int length) {
    wgmma::fence_async_proxy();
    const int h = item % p.heads;
    const ItemSentences sentences = item_sentences<PACKED>(p, item);
    const int first = sentences.first, count = sentences.count;
    if (p.dropout_p > 0.0f) fill_item_dropout<PACKED>(s_keep, p, key, item);
    __syncthreads();
    if (p.dropout_p > 0.0f && p.keep_bits != nullptr) {
      if constexpr (PACKED)
        store_pack_keep_bits(s_keep, pack, p, item);
      else
        store_keep_bits(s_keep, p, item);
    }
    const T* s_q = tile(stage, 0);
    const T* s_k = tile(stage, 1);
    const T* s_v = tile(stage, 2);

    float s[1][8][4];
    wgmma::fence();
#pragma unroll
    for (int step = 0; step < D / 16; ++step)
      wgmma::mma_ss<T>(s[0], wgmma::desc_k_major_tile(s_q, step),
                       wgmma::desc_k_major_tile(s_k, step), step > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::hold(s[0]);

    float o[1][D / 8][4] = {};
    float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {};
    if constexpr (PACKED) {
      // The block-diagonal mask here; softmax_key_tile then masks nothing (length and first
      // query 64).
      const int g = lane / 4, t4 = lane % 4;
      const TileRange keys[2] = {pack_visible_keys(pack, p, stage, warp * 16 + g),
                                 pack_visible_keys(pack, p, stage, warp * 16 + g + 8)};
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (!keys[e / 2].holds(nt * 8 + 2 * t4 + (e & 1))) s[0][nt][e] = -INFINITY;
    }
    softmax_key_tile<D, 1>(p, s, o, row_max, row_sum, s_keep + warp * 16 * kMaskStride, 0,
                           PACKED ? kTile : length, PACKED ? kTile : warp * 16, lane);
    // o += p v, D / 64 column blocks of o at a time (each an [8][4] accumulator). A register
    // that a product reads (A fragment or accumulator) and that is written between wgmma.fence
    // and that product makes ptxas inject a warpgroup.arrive before it (C7519), holding back the
    // products behind it. So every A fragment is built before the fence, and hold() pins each o
    // register there too: o is still 0 * alpha, two values per thread, and without the pin nvcc
    // copies them into the 32 accumulator registers of the second column block (head_dim 128)
    // right before its first product.
    auto& o_blocks = reinterpret_cast<float(&)[kBlocks][8][4]>(o[0]);
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) a_fragment<T>(a[kk], s[0], kk);
#pragma unroll
    for (int cb = 0; cb < kBlocks; ++cb) wgmma::hold(o_blocks[cb]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int cb = 0; cb < kBlocks; ++cb)
        wgmma::mma_rs<T, true>(o_blocks[cb], a[kk], wgmma::desc_mn_major_tile(s_v, cb, kk), true);
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int cb = 0; cb < kBlocks; ++cb) wgmma::hold(o_blocks[cb]);

    const int rows = count * p.q_len;
    if constexpr (PACKED)
      normalise_rows_to<D>(o[0], row_max[0], row_sum[0], p, lane, [&](int r, float value) {
        const int row = warp * 16 + r;
        if (row < rows)
          p.lse[pack_row_item(pack, p, item, row) * p.q_len + pack.query_position[row]] = value;
      });
    else
      normalise_rows<D>(o[0], row_max[0], row_sum[0], p,
                        p.lse + static_cast<int64_t>(item) * p.q_len + warp * 16, rows - warp * 16,
                        lane);
    // The products are complete, so the warp's own Q rows can stage its output rows.
    T* staged = tile(stage, 0);
    wgmma::stage_rows<T, D / 8>(staged, o[0], 1.0f, warp, lane);
    __syncwarp();
    wgmma::store_rows<T, D>(
        static_cast<T*>(p.out) + static_cast<int64_t>(first) * p.q_len * p.out_stride + h * D,
        p.out_stride, staged, rows, warp, lane);
  });
}

// Backward, head_dim 64: per item Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (rows: the warp's 16 keys), Pᵀ from
// the saved lse, delta, dSᵀ = Pᵀ (dPᵀ Z - delta), dV = (Pᵀ Z) dO and dK = dSᵀ Q from registers,
// then dQ = dS K with dSᵀ staged in shared memory.
// delta (per query) = rowsum(dO ∘ O) = Σ_keys P Z dP, since O = (P Z) V and dP = dO Vᵀ: it is
// summed from the Pᵀ and dPᵀ Z registers (over the warp's keys with shuffles, then over the warps
// through s_red in warp order) rather than from a staged out tile (8 KiB a stage). Masked keys have
// P = 0, dropped ones Z = 0, and padded queries dP = 0 (their dO rows are zero-filled), so none
// adds to it. Shared memory (74,048 bytes with the alignment slack: 3 blocks an SM on H100, with at
// most 168 registers): two stages of K, V, Q, dO tiles; within an item dSᵀ goes into V's slot (free
// once dPᵀ is done), dV into Q's (once dK is), dQ into dO's and dK into K's; then lse [2][64],
// s_red [64][4] f32, the keep mask, the keep words and the packing tables (PackTables, used where
// PACKED).
template <typename T, bool PACKED>
__global__ void __launch_bounds__(kThreads, 3) backward_short_wgmma_kernel(const Params p) {
  constexpr int D = 64, kWarps = kThreads / 32;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = wgmma::align_to_swizzle(smem_raw);
  auto tile = [&](int stage, int operand) {  // [stage][k, v, q, d_out]
    return reinterpret_cast<T*>(smem + (4 * stage + operand) * kOperandBytes<D>);
  };
  float* s_lse = reinterpret_cast<float*>(smem + 8 * kOperandBytes<D>);  // [2][kTile]
  float* s_red = s_lse + 2 * kTile;  // [kTile][kWarps], 16-byte aligned rows
  uint8_t* s_keep = reinterpret_cast<uint8_t*>(s_red + kTile * kWarps);          // [query][key]
  uint32_t* s_bits = reinterpret_cast<uint32_t*>(s_keep + kTile * kMaskStride);  // [2][kTile][2]
  PackTables& pack = *reinterpret_cast<PackTables*>(s_bits + 2 * kTile * 2);
  const bool saved_bits = p.dropout_p > 0.0f && p.keep_bits != nullptr;
  const RngKey key = saved_bits ? p.key : with_step_read(p.key);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  if constexpr (PACKED) fill_pack_rows(pack, p);  // with its barrier: the tables before any use
  auto load_item = [&](int item, int stage, int length) {
    const int h = item % p.heads;
    const ItemSentences s = item_sentences<PACKED>(p, item);
    const int first = s.first, count = s.count;
    const int64_t q_row0 = static_cast<int64_t>(first) * p.q_len;
    const int64_t kv_row0 = static_cast<int64_t>(first) * p.kv_len;
    auto load = [&](int operand, const void* base, int64_t row0, int64_t stride, auto&& valid) {
      wgmma::load_swizzled_rows<T, D, kThreads>(tile(stage, operand),
                                                static_cast<const T*>(base) + row0 * stride + h * D,
                                                stride, valid, threadIdx.x);
    };
    // Key rows past a sentence's length are zeroed.
    const uint32_t key_rows = loaded_key_rows_valid<PACKED, D>(pack, p, s, length);
    auto key_valid = [&](int row) { return loaded_key_row_in<D>(key_rows, row); };
    auto query_valid = [&](int row) { return row < count * p.q_len; };
    load(0, p.k, kv_row0, p.k_stride, key_valid);
    load(1, p.v, kv_row0, p.v_stride, key_valid);
    load(2, p.q, q_row0, p.q_stride, query_valid);
    load(3, p.d_out, q_row0, p.d_out_stride, query_valid);
    // Where a tile row's lse and keep words are: its own (sentence, head) item's query row.
    auto row_of = [&](int row) {
      if constexpr (PACKED)
        return (static_cast<int64_t>(first + row / p.q_len) * p.heads + h) * p.q_len +
               row % p.q_len;
      return static_cast<int64_t>(item) * p.q_len + row;
    };
    if (threadIdx.x < kTile) {  // the raw lse; rows past the queries read 0 (their Q, dO are 0)
      const bool valid = query_valid(threadIdx.x);
      cp_async4(s_lse + stage * kTile + threadIdx.x, p.lse + (valid ? row_of(threadIdx.x) : 0),
                valid);
    }
    if (saved_bits) {  // the forward's keep words, two a query row; rows past the queries read 0
      const int row = threadIdx.x / 2, half = threadIdx.x % 2;
      const bool valid = query_valid(row);
      // Packed: both threads of a row take its word 0 (expand_keep_bits shifts it into place).
      const int word = PACKED ? 0 : half;
      cp_async4(s_bits + stage * 2 * kTile + threadIdx.x,
                p.keep_bits + (valid ? row_of(row) * 2 + word : 0), valid);
    }
    if constexpr (PACKED) store_pack_lengths(pack, p, item, stage);
  };
  for_each_item_prefetched(p, load_item, [&](int item, int stage, int length) {
    wgmma::fence_async_proxy();
    const int h = item % p.heads;
    const ItemSentences sentences = item_sentences<PACKED>(p, item);
    const int first = sentences.first, count = sentences.count;
    const bool dropout = p.dropout_p > 0.0f;
    // Each thread expands the words it loaded itself (complete at the prefetch's wait).
    if (saved_bits) {
      expand_keep_bits<PACKED>(s_keep, s_bits + stage * 2 * kTile, pack, p);
    } else if (dropout) {  // the forward's entries (the others meet P = 0 or dO = 0)
      fill_item_dropout<PACKED>(s_keep, p, key, item);
    }
    T* s_k = tile(stage, 0);
    T* s_v = tile(stage, 1);
    T* s_q = tile(stage, 2);
    T* s_do = tile(stage, 3);
    // The thread that loaded a query's lse turns it into the exponent's offset, -lse log2(e), once
    // a query instead of at each of its elements; -inf stays -inf (a query with no visible key),
    // so that P there is exp2(-inf) = 0.
    float* offsets = s_lse + stage * kTile;
    if (threadIdx.x < kTile) {
      const float lse = offsets[threadIdx.x];
      offsets[threadIdx.x] = lse == -INFINITY ? -INFINITY : -lse * kLog2e;
    }
    __syncthreads();
    float pt[8][4], dpt[8][4];
    wgmma::fence();
#pragma unroll
    for (int step = 0; step < D / 16; ++step)
      wgmma::mma_ss<T>(pt, wgmma::desc_k_major_tile(s_k, step), wgmma::desc_k_major_tile(s_q, step),
                       step > 0);
#pragma unroll
    for (int step = 0; step < D / 16; ++step)
      wgmma::mma_ss<T>(dpt, wgmma::desc_k_major_tile(s_v, step),
                       wgmma::desc_k_major_tile(s_do, step), step > 0);
    wgmma::commit();
    // While Sᵀ = K Qᵀ and dPᵀ = V dOᵀ run on the tensor cores: the keep flags of this thread's 32
    // elements, bit 4nt + e for [nt][e] (both operands of those products are in shared memory, so
    // other work may run before the wait).
    const int key0 = warp * 16 + g;
    uint32_t kept = 0;
    if (dropout) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int query = nt * 8 + 2 * t4 + (e & 1), key = key0 + (e / 2) * 8;
          kept |= static_cast<uint32_t>(s_keep[query * kMaskStride + key] != 0) << (4 * nt + e);
        }
    }
    auto keep_factor = [&](int nt, int e) {
      return dropout ? ((kept >> (4 * nt + e)) & 1u ? p.keep_scale : 0.0f) : 1.0f;
    };
    wgmma::wait<0>();
    wgmma::hold(pt);
    wgmma::hold(dpt);

    // Pᵀ in pt (masked keys past the length or after the query: 0), dPᵀ Z in dpt, and this
    // thread's share of delta: Σ Pᵀ dPᵀ Z over its two keys, per query (index 2nt + c).
    const bool masked = PACKED || length < kTile || p.causal;
    TileRange queries[2] = {};  // packed: the query rows that see each of this thread's keys
    if constexpr (PACKED) {
#pragma unroll
      for (int k = 0; k < 2; ++k) queries[k] = pack_visible_queries(pack, p, stage, key0 + 8 * k);
    }
    float delta_part[16];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int query = nt * 8 + 2 * t4 + (e & 1), key = key0 + (e / 2) * 8;
        // A query with no visible key (offset -inf) gets P = 0.
        float prob = fast_exp2(fmaf(pt[nt][e], p.scale_log2, offsets[query]));
        if constexpr (PACKED) {
          if (!queries[e / 2].holds(query)) prob = 0.0f;
        } else if (masked && (key >= length || (p.causal && key > query))) {
          prob = 0.0f;
        }
        pt[nt][e] = prob;
        dpt[nt][e] *= keep_factor(nt, e);
      }
#pragma unroll
      for (int c = 0; c < 2; ++c)
        delta_part[2 * nt + c] = pt[nt][c] * dpt[nt][c] + pt[nt][c + 2] * dpt[nt][c + 2];
    }
    // Over the warp's 16 keys: lane 4g + t4 then holds queries 8g + 2t4, + 1.
    reduce_scatter_rows(delta_part, lane);
#pragma unroll
    for (int c = 0; c < 2; ++c) s_red[(8 * g + 2 * t4 + c) * kWarps + warp] = delta_part[c];
    __syncthreads();  // s_red complete

    // delta over the 4 warps' keys, in warp order (every thread of a query gets the same bits),
    // then dSᵀ = Pᵀ (dPᵀ Z - delta) in dpt and Pᵀ Z in pt.
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float4 r = *reinterpret_cast<const float4*>(s_red + (nt * 8 + 2 * t4 + c) * kWarps);
        const float delta = ((r.x + r.y) + r.z) + r.w;
#pragma unroll
        for (int e = c; e < 4; e += 2) {
          dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - delta);
          pt[nt][e] *= keep_factor(nt, e);
        }
      }

    // dV = (Pᵀ Z) dO and dK = dSᵀ Q, the A fragments all built before the fence (see the
    // forward: no warpgroup.arrive injected between the products).
    float dv[8][4], dk[8][4];
    uint32_t a_pt[4][4], a_dst[4][4];
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
      a_fragment<T>(a_pt[kq], pt, kq);
      a_fragment<T>(a_dst[kq], dpt, kq);
    }
    wgmma::fence();
#pragma unroll
    for (int kq = 0; kq < 4; ++kq)
      wgmma::mma_rs<T, true>(dv, a_pt[kq], wgmma::desc_mn_major_tile(s_do, 0, kq), kq > 0);
#pragma unroll
    for (int kq = 0; kq < 4; ++kq)
      wgmma::mma_rs<T, true>(dk, a_dst[kq], wgmma::desc_mn_major_tile(s_q, 0, kq), kq > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::hold(dv);
    wgmma::hold(dk);
    // dSᵀ into shared memory ([key][query], V's slot: dPᵀ is done) for dQ = dS K. Only now: while
    // a product whose A operand comes from registers runs, other code must not get the chance to
    // reuse them.
    T* s_ds = s_v;
    wgmma::stage_rows<T, 8>(s_ds, dpt, 1.0f, warp, lane);
    wgmma::fence_async_proxy();
    __syncthreads();  // s_ds complete

    // dQ = dS K on the tensor cores while dV goes out through Q's rows (every warp's dK product,
    // the last to read Q, was done before the barrier).
    float dq[8][4];
    wgmma::fence();
#pragma unroll
    for (int step = 0; step < 4; ++step)
      wgmma::mma_ss<T, true, true>(dq, wgmma::desc_mn_major_tile(s_ds, 0, step),
                                   wgmma::desc_mn_major_tile(s_k, 0, step), step > 0);
    wgmma::commit();
    const int64_t q_row0 = static_cast<int64_t>(first) * p.q_len;
    const int64_t kv_row0 = static_cast<int64_t>(first) * p.kv_len;
    wgmma::stage_rows<T, 8>(s_q, dv, 1.0f, warp, lane);
    __syncwarp();
    wgmma::store_rows<T, D>(static_cast<T*>(p.dv) + kv_row0 * p.dv_stride + h * D, p.dv_stride, s_q,
                            count * p.kv_len, warp, lane);
    wgmma::wait<0>();
    wgmma::hold(dq);
    __syncthreads();  // the dQ product is done with K: K's and dO's rows stage dK and dQ
    wgmma::stage_rows<T, 8>(s_do, dq, p.scale, warp, lane);
    wgmma::stage_rows<T, 8>(s_k, dk, p.scale, warp, lane);
    __syncwarp();
    wgmma::store_rows<T, D>(static_cast<T*>(p.dq) + q_row0 * p.dq_stride + h * D, p.dq_stride, s_do,
                            count * p.q_len, warp, lane);
    wgmma::store_rows<T, D>(static_cast<T*>(p.dk) + kv_row0 * p.dk_stride + h * D, p.dk_stride, s_k,
                            count * p.kv_len, warp, lane);
    if (p.bias_partials != nullptr) {
      // The staged rows are the stored values, so their sums are the stored gradients' sums. The
      // sums' products are complete before the loop's closing barrier, which keeps the next
      // prefetch off these tiles.
      wgmma::fence_async_proxy();
      __syncthreads();  // every warp's dQ, dK and dV rows staged
      store_bias_partials<T>(p, s_do, s_k, s_q, sentences, h);
    }
  });
}

EnvSwitch pack_switch("NMT_ATTENTION_PACK", /*default_on=*/true);

// The launch parameters with p.pack set: several sentences an item where they fit (short_pack.cuh)
// and the switch is on.
Params with_pack(Params p) {
  p.pack = attention_pack() ? short_pack(p.q_len, p.kv_len) : 1;
  return p;
}

}  // namespace

void launch_forward_short_wgmma(DType dtype, int head_dim, const Params& given,
                                cudaStream_t stream) {
  const Params p = with_pack(given);
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    using T = typename decltype(type_tag)::type;
    constexpr int D = decltype(dim_tag)::value;
    static int slots[2] = {};  // one sentence an item, packed
    const size_t smem = 1024 + 6 * kOperandBytes<D> + kTile * kMaskStride + sizeof(PackTables);
    if (p.pack > 1)
      launch_persistent(forward_short_wgmma_kernel<T, D, true>, slots[1], smem, p, stream);
    else
      launch_persistent(forward_short_wgmma_kernel<T, D, false>, slots[0], smem, p, stream);
  });
}

bool launch_backward_short_wgmma(DType dtype, Params given, const AttentionBiasGrads& bias_grads,
                                 cudaStream_t stream) {
  Params p = with_pack(given);
  float* const bias[kBiasOperands] = {static_cast<float*>(bias_grads.q.data),
                                      static_cast<float*>(bias_grads.k.data),
                                      static_cast<float*>(bias_grads.v.data)};
  const bool sum_biases = bias[0] != nullptr || bias[1] != nullptr || bias[2] != nullptr;
  // The partials: [batch, 3, heads * 64] f32; their second pass waits for an active deferral's
  // flush where it has room (kernels/cuda/reduce.h).
  std::optional<PartialSumPass> bias_pass;
  if (sum_biases) {
    bias_pass.emplace(p.batch, static_cast<int64_t>(p.heads) * 64, kBiasOperands, stream);
    p.bias_partials = bias_pass->partials();
  }
  dispatch(dtype, 64, [&](auto type_tag, auto) {
    using T = typename decltype(type_tag)::type;
    static int slots[2] = {};  // one sentence an item, packed
    // Tiles (two stages of k, v, q, d_out), lse, the delta partials, keep mask, keep words and
    // the packing tables: 74,048 bytes, within the 76,800 that let 3 blocks share an H100 SM (228
    // KiB, 1 KiB reserved a block).
    const size_t smem = 1024 + 8 * kOperandBytes<64> + 2 * kTile * sizeof(float) +
                        kTile * (kThreads / 32) * sizeof(float) + kTile * kMaskStride +
                        2 * 2 * kTile * sizeof(uint32_t) + sizeof(PackTables);
    if (p.pack > 1)
      launch_persistent(backward_short_wgmma_kernel<T, true>, slots[1], smem, p, stream);
    else
      launch_persistent(backward_short_wgmma_kernel<T, false>, slots[0], smem, p, stream);
  });
  if (!sum_biases) return false;
  bias_pass->finish(bias[0], bias[1], bias[2]);
  return true;
}

}  // namespace nmt::cuda::flash

namespace nmt::cuda {

void set_attention_pack(bool on) {
  flash::pack_switch.set(on);
}

bool attention_pack() {
  return flash::pack_switch.get();
}

}  // namespace nmt::cuda
