// Several short sentences in one item of the short-sentence wgmma kernels (short_wgmma.cu). A
// tile has 64 rows, so a (sentence, head) item of 32 tokens leaves half of every product, load
// and softmax idle, and at 16 tokens three quarters. Where q_len and kv_len are both at most 32,
// an item takes p.pack = min(64 / q_len, 64 / kv_len, kMaxPack) consecutive sentences of one head:
// their query rows are consecutive rows of Q (sentence s at tile rows s * q_len ..), their key
// rows consecutive rows of K and V (s * kv_len ..), so the loads and stores stay one contiguous
// row range each. A query sees only its own sentence's keys, up to that sentence's length (and
// with causal, up to its own position): the tile is block-diagonal. Each sentence's dropout mask,
// keep words, log-sum-exp and bias partials are those of its own (sentence, head) item, at the
// same offsets; only the order in which the hardware adds a row's terms differs, so results
// match the one-sentence kernels to rounding, not bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cuda/flash_attention/common.cuh"

namespace nmt::cuda::flash {

constexpr int kMaxPack = 8;

// Sentences per item for the short kernels at these lengths (1: one sentence an item).
inline int short_pack(int q_len, int kv_len) {
  if (q_len < 1 || kv_len < 1 || q_len > kTile / 2 || kv_len > kTile / 2) return 1;
  const int by_q = kTile / q_len, by_kv = kTile / kv_len;
  const int pack = by_q < by_kv ? by_q : by_kv;
  return pack < kMaxPack ? pack : kMaxPack;
}

// Which sentence of a packed item each tile row and key column belongs to (-1 past the last whole
// sentence), its position there, and the item's sentence lengths per prefetch stage (0 for a
// sentence past the batch). In shared memory; the row and column tables are the kernel's, filled
// once (fill_pack_rows), the lengths each item's (store_pack_lengths, with its loads).
struct PackTables {
  int8_t query_sentence[kTile], query_position[kTile];
  int8_t key_sentence[kTile], key_position[kTile];
  int lengths[2][kMaxPack];
};

// Called by the whole block once, before its first item; ends with the barrier that makes the
// tables visible to every thread.
__device__ __forceinline__ void fill_pack_rows(PackTables& t, const Params& p) {
  const int r = static_cast<int>(threadIdx.x);
  if (r < kTile) {
    const bool query = r < p.pack * p.q_len, key = r < p.pack * p.kv_len;
    t.query_sentence[r] = static_cast<int8_t>(query ? r / p.q_len : -1);
    t.query_position[r] = static_cast<int8_t>(query ? r % p.q_len : 0);
    t.key_sentence[r] = static_cast<int8_t>(key ? r / p.kv_len : -1);
    t.key_position[r] = static_cast<int8_t>(key ? r % p.kv_len : 0);
  }
  __syncthreads();
}

// The first sentence of an item, and how many it has (the last group may be short).
__device__ __forceinline__ int pack_first(const Params& p, int item) {
  return item / p.heads * p.pack;
}
__device__ __forceinline__ int pack_count(const Params& p, int item) {
  const int left = p.batch - pack_first(p, item);
  return left < p.pack ? left : p.pack;
}

// An item's first sentence and how many it holds: one (sentence, head) item each, or PACKED's
// consecutive sentences of one head.
struct ItemSentences {
  int first, count;
};
template <bool PACKED>
__device__ __forceinline__ ItemSentences item_sentences(const Params& p, int item) {
  if constexpr (PACKED) return {pack_first(p, item), pack_count(p, item)};
  return {item / p.heads, 1};
}

// Whether key row `row` of an item's K and V tiles holds a real key: below the sentence's length
// (`length`, the one-sentence kernels'), or for a packed item below its own sentence's length (the
// row's sentence and position from the tables, not divisions).
template <bool PACKED>
__device__ __forceinline__ bool key_row_valid(const PackTables& t, const Params& p, ItemSentences s,
                                              int length, int row) {
  if constexpr (PACKED) {
    const int sentence = t.key_sentence[row];
    return sentence >= 0 && sentence < s.count &&
           t.key_position[row] < clamped_length(p, s.first + sentence);
  }
  return row < length;
}

// key_row_valid of the key rows this thread loads (wgmma::load_swizzled_rows with kThreads threads
// at head_dim D: rows thread / (D / 8) + i * rows_per_pass), bit i for row i * rows_per_pass + ..;
// K and V share them, so each row's test (for a packed item, a length read from global memory) is
// made once.
template <bool PACKED, int D>
__device__ __forceinline__ uint32_t loaded_key_rows_valid(const PackTables& t, const Params& p,
                                                          ItemSentences s, int length) {
  constexpr int kRowsPerPass = kThreads / (D / 8);
  const int row0 = static_cast<int>(threadIdx.x) / (D / 8);
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < kTile / kRowsPerPass; ++i)
    bits |= key_row_valid<PACKED>(t, p, s, length, row0 + i * kRowsPerPass) ? 1u << i : 0u;
  return bits;
}
template <int D>
__device__ __forceinline__ bool loaded_key_row_in(uint32_t bits, int row) {
  return (bits >> (row / (kThreads / (D / 8))) & 1u) != 0;
}

// The item's sentence lengths into stage `stage` (threads 0 .. kMaxPack - 1; visible after the
// barrier that precedes their use).
__device__ __forceinline__ void store_pack_lengths(PackTables& t, const Params& p, int item,
                                                   int stage) {
  const int s = static_cast<int>(threadIdx.x);
  if (s >= kMaxPack) return;
  t.lengths[stage][s] = s < pack_count(p, item) ? clamped_length(p, pack_first(p, item) + s) : 0;
}

// Tile query row `query` sees tile key column `key` in the item at `stage` where its sentence
// holds the key at a position below that sentence's length (and with causal, at most the query's
// own position). Both functions give those as one range of the other index: in the kernels' loops
// a thread meets 2 rows and 16 columns, or 2 columns and 16 rows, so a range a thread costs two
// compares an element instead of five table reads.
struct TileRange {
  int begin, end;  // [begin, end)
  __device__ __forceinline__ bool holds(int i) const { return i >= begin && i < end; }
};
// The key columns query row `query` sees.
__device__ __forceinline__ TileRange pack_visible_keys(const PackTables& t, const Params& p,
                                                       int stage, int query) {
  const int sentence = t.query_sentence[query];
  if (sentence < 0) return {0, 0};
  const int length = t.lengths[stage][sentence], seen = t.query_position[query] + 1;
  const int begin = sentence * p.kv_len;
  return {begin, begin + (p.causal && seen < length ? seen : length)};
}
// The query rows that see key column `key`.
__device__ __forceinline__ TileRange pack_visible_queries(const PackTables& t, const Params& p,
                                                          int stage, int key) {
  const int sentence = t.key_sentence[key], position = t.key_position[key];
  if (sentence < 0 || position >= t.lengths[stage][sentence]) return {0, 0};
  const int begin = sentence * p.q_len;
  return {p.causal ? begin + position : begin, begin + p.q_len};
}

// The (sentence, head) item of tile query row `row` of a packed item (row < pack_count * q_len),
// as the one-sentence kernels number them, and the row's query position.
__device__ __forceinline__ int64_t pack_row_item(const PackTables& t, const Params& p, int item,
                                                 int row) {
  return static_cast<int64_t>(pack_first(p, item) + t.query_sentence[row]) * p.heads +
         item % p.heads;
}

// Each sentence's dropout mask at its diagonal block of the tile (rows s * q_len, columns s *
// kv_len): the entries its own item draws (fill_dropout_part), off-diagonal ones left as they were
// (never visible). kv_len % 8 == 0 keeps each block's columns 8-byte aligned for the fast path.
// `key` is p.key with its step read (with_step_read).
__device__ __forceinline__ void fill_pack_dropout(uint8_t* keep, const Params& p, const RngKey& key,
                                                  int item) {
  const int first = pack_first(p, item), count = pack_count(p, item), h = item % p.heads;
  for (int s = 0; s < count; ++s)
    fill_dropout_part(keep + s * p.q_len * kMaskStride + s * p.kv_len, key, p.dropout_p,
                      static_cast<uint64_t>((first + s) * p.heads + h) * p.q_len * p.kv_len,
                      p.kv_len, static_cast<int>(threadIdx.x), p.q_len, p.kv_len);
}

}  // namespace nmt::cuda::flash
