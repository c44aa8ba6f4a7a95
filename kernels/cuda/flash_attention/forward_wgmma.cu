// Fused attention forward for long sequences on Hopper (wgmma, sm_90a): one block of two
// warpgroups per (128-query tile, sentence, head), each warpgroup owning 64 queries; both share the
// 64-key K and V tiles, which stream through a multi-stage cp.async ring of 128-byte swizzled
// blocks. S = Q Kᵀ reads Q and K from shared memory (mma_ss), O += P V takes P from registers
// (mma_rs). Within a warpgroup the scores of tile j are issued together with tile j - 1's P V, and
// the softmax of tile j runs while P V is still on the tensor cores; the softmax's running max
// moves lazily, so the output is rarely rescaled. Semantics equal forward_kernel
// (forward.cu): same masks, dropout mask, out and lse (up to rounding).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/flash_attention/common.cuh"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/flash_attention/traits_forward_wgmma.h"
#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::flash {
namespace {

// This thread's share of copying [64][D] tiles of one matrix into swizzled blocks. Its chunks share
// one column and one swizzle phase, so one shared offset and one global offset serve every pass.
template <typename T, int D, int kStages>
struct TileCopy {
  using P = Plan<D, kStages>;
  int row;               // the first chunk's row in the tile
  uint32_t smem_offset;  // its byte offset inside a tile
  int64_t offset;        // its element offset from the tile's first row
  int64_t pass_stride;   // elements between the rows of two passes
  __device__ __forceinline__ TileCopy(int tid, int64_t stride) {
    row = tid / P::kChunksPerRow;
    const int chunk = tid % P::kChunksPerRow;
    smem_offset = (chunk / 8) * kBlockBytes + row * kRowBytes + (((chunk % 8) ^ (row % 8)) << 4);
    offset = row * stride + chunk * 8;
    pass_stride = P::kRowsPerPass * stride;
  }
  // Rows [0, valid_rows) of the tile whose first row is `gmem` (a readable row) into the tile at
  // shared address `tile`; the other rows become zeros (padding may hold anything, even NaN).
  __device__ __forceinline__ void copy(uint32_t tile, const T* gmem, int valid_rows) const {
    const T* src = gmem + offset;
    if (valid_rows >= kTile) {
#pragma unroll
      for (int i = 0; i < P::kPasses; ++i)
        cp_async16(tile + smem_offset + i * P::kRowsPerPass * kRowBytes, src + i * pass_stride,
                   true);
    } else {
#pragma unroll
      for (int i = 0; i < P::kPasses; ++i) {
        const bool valid = row + i * P::kRowsPerPass < valid_rows;
        cp_async16(tile + smem_offset + i * P::kRowsPerPass * kRowBytes,
                   valid ? src + i * pass_stride : gmem, valid);
      }
    }
  }
};

// Registers of one thread in a warpgroup: scores of the current tile, P of the previous tile (the A
// operand of its P V), the output accumulators, and rows g and g + 8's running max and sum share.
template <typename T, int D>
struct Rows {
  static constexpr int kDBlocks = D / wgmma::kBlockCols;
  float s[8][4];
  uint32_t prob[4][4];
  float o[kDBlocks][8][4];
  float row_max[2], row_sum[2];

  // s = q kᵀ for the warpgroup's 64 queries and the tile's 64 keys.
  __device__ __forceinline__ void issue_scores(uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int step = 0; step < 4; ++step)
        wgmma::mma_ss<T>(s, q_desc + db * kDescBlock + step * kDescKStep,
                         k_desc + db * kDescBlock + step * kDescKStep, db > 0 || step > 0);
  }
  // o += p v, with p the previous tile's probabilities.
  __device__ __forceinline__ void issue_pv(uint64_t v_desc) {
#pragma unroll
    for (int step = 0; step < 4; ++step)
#pragma unroll
      for (int db = 0; db < kDBlocks; ++db)
        wgmma::mma_rs<T, true>(o[db], prob[step], v_desc + db * kDescBlock + step * kDescRowStep,
                               true);
  }
  __device__ __forceinline__ void hold_output() {
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db) wgmma::hold(o[db]);
  }
  // -inf where the key is past the length or (causal) after the query.
  __device__ __forceinline__ void mask(int n0, int length, bool causal, int first_query, int g,
                                       int t4) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + nt * 8 + 2 * t4 + (e & 1);
        const int query = first_query + g + (e / 2) * 8;
        if (key >= length || (causal && key > query)) s[nt][e] = -INFINITY;
      }
  }
  // Online softmax in base 2 (as forward_kernel): s becomes exp2(s * scale_log2 - reference),
  // the sums move on, and alpha[r] is the factor for the output accumulated so far. The reference
  // (row_max) is a running max that moves only when a score passes it by more than kLazyLog2 in the
  // exp2 domain: the probabilities then stay below 2^kLazyLog2 (far inside f32 and bf16), and after
  // the first tiles the output rarely needs rescaling. Returns whether a row of this thread moved.
  __device__ __forceinline__ bool softmax(float scale_log2, float (&alpha)[2]) {
    constexpr float kLazyLog2 = 8.0f;
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float old_max = row_max[r];
      // A row with nothing visible yet (-inf) moves as soon as it sees a finite score.
      const bool move = tile_max * scale_log2 > old_max * scale_log2 + kLazyLog2;
      if (move) row_max[r] = tile_max;
      moved = moved || move;
      // Still -inf: subtract 0 so exp2 gives 0, not NaN.
      const float base = row_max[r] == -INFINITY ? 0.0f : row_max[r] * scale_log2;
      alpha[r] = move ? fast_exp2(old_max * scale_log2 - base) : 1.0f;
      float sum[2] = {0.0f, 0.0f};  // two chains: half the dependent adds
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float e = fast_exp2(fmaf(s[nt][2 * r + c], scale_log2, -base));
          s[nt][2 * r + c] = e;
          sum[nt % 2] += e;
        }
      row_sum[r] = row_sum[r] * alpha[r] + (sum[0] + sum[1]);
    }
    return moved;
  }
  // Dropout after the sum (the softmax is normalised before dropout; 1/(1-p) comes at the end).
  // keep: [kBlockQueries][kMaskStride] of this tile; row = the thread's row g in the block.
  __device__ __forceinline__ void drop(const uint8_t* keep, int row, int t4) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!keep[(row + (e / 2) * 8) * kMaskStride + nt * 8 + 2 * t4 + (e & 1)]) s[nt][e] = 0.0f;
  }
  __device__ __forceinline__ void rescale_output(const float (&alpha)[2]) {
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        o[db][nt][0] *= alpha[0];
        o[db][nt][1] *= alpha[0];
        o[db][nt][2] *= alpha[1];
        o[db][nt][3] *= alpha[1];
      }
  }
  // Score chunks 2k, 2k+1 are the A fragment of keys 16k..16k+15.
  __device__ __forceinline__ void pack_probabilities() {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      prob[k][0] = pack2<T>(s[2 * k][0], s[2 * k][1]);
      prob[k][1] = pack2<T>(s[2 * k][2], s[2 * k][3]);
      prob[k][2] = pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]);
      prob[k][3] = pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
    }
  }
};

template <int kStages>
__device__ __forceinline__ int next_stage(int stage) {
  return stage + 1 == kStages ? 0 : stage + 1;
}

// Block first_block + blockIdx.x: the query blocks of one (sentence, head) are neighbours, so the
// blocks sharing its K and V run together and read them from L2 once they are there (a grid with
// the query block as its slow index ran 15% slower at 32x8x512x512, d64).
template <typename T, int D, int kStages>
__global__ void __launch_bounds__(kBlockThreads, D == 64 ? 2 : 1)
    forward_wgmma_kernel(const Params p, int64_t first_block) {
  using P = Plan<D, kStages>;
  constexpr int kDBlocks = P::kDBlocks;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = wgmma::align_to_swizzle(smem_raw);
  const uint32_t smem_base = shared_address(smem);
  uint8_t* s_keep = smem + P::kKeepOffset;  // 2 buffers

  // Through a shuffle from lane 0 so that ptxas sees the warpgroup index (and the branches on it
  // around the products) as warp-uniform; otherwise it serialises the wgmmas.
  const int tid = threadIdx.x, warp = tid / 32;
  const int warpgroup = __shfl_sync(0xffffffffu, tid / kGroupThreads, 0);
  const int lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int query_blocks = (p.q_len + kBlockQueries - 1) / kBlockQueries;
  const int64_t block = first_block + blockIdx.x;
  const int bh = static_cast<int>(block / query_blocks), b = bh / p.heads, h = bh % p.heads;
  // Last tiles first: with a causal mask they have the most keys, and start before the short ones.
  const int m0 = (query_blocks - 1 - static_cast<int>(block % query_blocks)) * kBlockQueries;
  const int length = clamped_length(p, b);
  // Keys [0, key_end) are visible to some query of the block.
  const int key_end = p.causal ? min(length, m0 + kBlockQueries) : length;
  const int key_tiles = (key_end + kTile - 1) / kTile;
  const int q_rows = min(kBlockQueries, p.q_len - m0);
  T* out = static_cast<T*>(p.out) + (static_cast<int64_t>(b) * p.q_len + m0) * p.out_stride + h * D;
  float* lse = p.lse + static_cast<int64_t>(bh) * p.q_len + m0;

  if (key_tiles == 0) {  // every key masked for the whole block: out 0, lse -inf
    for (int e = tid; e < q_rows * D; e += kBlockThreads)
      out[static_cast<int64_t>(e / D) * p.out_stride + e % D] = zero_value<T>();
    for (int r = tid; r < q_rows; r += kBlockThreads) lse[r] = -INFINITY;
    return;
  }
  const T* q =
      static_cast<const T*>(p.q) + (static_cast<int64_t>(b) * p.q_len + m0) * p.q_stride + h * D;
  const T* k = static_cast<const T*>(p.k) + static_cast<int64_t>(b) * p.kv_len * p.k_stride + h * D;
  const T* v = static_cast<const T*>(p.v) + static_cast<int64_t>(b) * p.kv_len * p.v_stride + h * D;

  const TileCopy<T, D, kStages> k_copy(tid, p.k_stride), v_copy(tid, p.v_stride);
  auto load_kv = [&](int tile, int stage) {
    const int n = tile * kTile;
    k_copy.copy(smem_base + P::kKOffset + stage * P::kTileBytes, k + n * p.k_stride, length - n);
    v_copy.copy(smem_base + P::kVOffset + stage * P::kTileBytes, v + n * p.v_stride, length - n);
  };
  const bool dropout = p.dropout_p > 0.0f;
  // Keep masks of tile `tile` into buffer tile % 2, the block's 128 rows: each warpgroup draws
  // the 64 rows of its queries.
  auto fill_keep = [&](int tile) {
    fill_dropout_tile(s_keep + (tile % 2) * P::kKeepBytes + warpgroup * kTile * kMaskStride, p.key,
                      p.dropout_p,
                      (static_cast<uint64_t>(bh) * p.q_len + m0 + warpgroup * kTile) * p.kv_len +
                          static_cast<uint64_t>(tile) * kTile,
                      p.kv_len, tid % kGroupThreads);
  };

  {
    const TileCopy<T, D, kStages> q_copy(tid, p.q_stride);
#pragma unroll
    for (int w = 0; w < kWarpgroups; ++w)
      q_copy.copy(smem_base + w * P::kTileBytes,
                  q_rows > w * kTile ? q + w * kTile * p.q_stride : q, q_rows - w * kTile);
  }
  load_kv(0, 0);
  cp_async_commit();
#pragma unroll
  for (int t = 1; t < P::kPrefetch; ++t) {
    if (t < key_tiles) load_kv(t, t);
    cp_async_commit();  // possibly empty: one group per tile keeps the wait count fixed
  }
  if (dropout) fill_keep(0);

  // The warpgroup's queries see keys [0, group_key_end): with a causal mask the first warpgroup
  // needs fewer tiles than the block, and skips the products of the rest.
  const int group_row0 = warpgroup * kTile, warp_row0 = warp * 16;  // relative to m0
  const int group_key_end = p.causal ? min(length, m0 + group_row0 + kTile) : length;
  const int group_tiles = (group_key_end + kTile - 1) / kTile;  // >= 1
  const uint64_t q_desc = wgmma::descriptor(smem_base + warpgroup * P::kTileBytes);
  const uint64_t k_desc0 = wgmma::descriptor(smem_base + P::kKOffset);
  const uint64_t v_desc0 = wgmma::descriptor(smem_base + P::kVOffset);
  constexpr uint64_t kDescStage = P::kTileBytes >> 4;

  Rows<T, D> rows;
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) rows.o[db][nt][e] = 0.0f;
  rows.row_max[0] = rows.row_max[1] = -INFINITY;
  rows.row_sum[0] = rows.row_sum[1] = 0.0f;

  // stage: tile j's; previous: tile j - 1's; load: tile j + kPrefetch's.
  int stage = 0, previous = kStages - 1, load_stage = P::kPrefetch;
  for (int j = 0; j < key_tiles; ++j) {
    cp_async_wait<P::kPrefetch - 1>();  // this thread's part of tile j has landed
    wgmma::fence_async_proxy();
    __syncthreads();  // everyone's part too, and every product of tile j - 2 is done
    if (j + P::kPrefetch < key_tiles) load_kv(j + P::kPrefetch, load_stage);
    cp_async_commit();
    if (dropout && j + 1 < key_tiles) fill_keep(j + 1);  // published by the next barrier

    const uint64_t v_previous = v_desc0 + previous * kDescStage;
    if (j < group_tiles) {
      const int n0 = j * kTile;
      // ptxas wants a wgmma.fence in the same straight-line code as the products it covers: a
      // branch between the fence and a product makes it inject a warpgroup.arrive (C7519) before
      // the product. So each case has its own fence and issues all of its products after it.
      if (j > 0) {
        wgmma::fence();  // o and prob were last written by ordinary code
        rows.issue_scores(q_desc, k_desc0 + stage * kDescStage);
        wgmma::commit();
        rows.issue_pv(v_previous);
        wgmma::commit();
        wgmma::wait<1>();  // the scores, not yet P V
      } else {
        wgmma::fence();
        rows.issue_scores(q_desc, k_desc0 + stage * kDescStage);
        wgmma::commit();
        wgmma::wait<0>();
      }
      wgmma::hold(rows.s);
      // Masks only where the tile crosses the length or (for this warp) the diagonal.
      if (n0 + kTile > length || (p.causal && n0 + kTile - 1 > m0 + warp_row0))
        rows.mask(n0, length, p.causal, m0 + warp_row0, g, t4);
      float alpha[2];
      const bool moved = rows.softmax(p.scale_log2, alpha);
      if (dropout) rows.drop(s_keep + (j % 2) * P::kKeepBytes, warp_row0 + g, t4);
      // Unconditional (at j = 0 nothing is in flight and the wait costs nothing): ptxas does not
      // connect this j > 0 with the one above, so a wait only under j > 0 left it a path with
      // P V in flight past the loop, and it injected a warpgroup.wait (C7517) before the reads
      // of o after it.
      wgmma::wait<0>();
      rows.hold_output();
      if (j > 0 && __any_sync(0xffffffffu, moved)) rows.rescale_output(alpha);
      rows.pack_probabilities();
    } else if (j == group_tiles) {  // causal: this warpgroup's last P V
      wgmma::fence();
      rows.issue_pv(v_previous);
      wgmma::commit();
      wgmma::wait<0>();
      rows.hold_output();
    }
    previous = stage;
    stage = next_stage<kStages>(stage);
    load_stage = next_stage<kStages>(load_stage);
  }
  if (group_tiles == key_tiles) {
    wgmma::fence();
    rows.issue_pv(v_desc0 + previous * kDescStage);
    wgmma::commit();
    wgmma::wait<0>();
    rows.hold_output();
  }

  // Normalise, stage the warpgroup's rows in its Q blocks (swizzled, so the 8 rows of a store land
  // in different banks), write 16-byte chunks.
  float lse_rows[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = rows.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float factor = sum > 0.0f ? p.keep_scale / sum : 0.0f;
#pragma unroll
    for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        rows.o[db][nt][2 * r] *= factor;
        rows.o[db][nt][2 * r + 1] *= factor;
      }
    lse_rows[r] = sum > 0.0f ? rows.row_max[r] * p.scale + logf(sum) : -INFINITY;
  }
  __syncthreads();  // every product has stopped reading the Q blocks
  T* staged = reinterpret_cast<T*>(smem + warpgroup * P::kTileBytes);
  const int row_in_group = warp_row0 - group_row0 + g;
#pragma unroll
  for (int db = 0; db < kDBlocks; ++db)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      T* staged_block = staged + db * (kBlockBytes / sizeof(T));
      const int col = nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(staged_block + wgmma::swizzled_offset(row_in_group, col)) =
          pack2<T>(rows.o[db][nt][0], rows.o[db][nt][1]);
      *reinterpret_cast<uint32_t*>(staged_block + wgmma::swizzled_offset(row_in_group + 8, col)) =
          pack2<T>(rows.o[db][nt][2], rows.o[db][nt][3]);
    }
  __syncwarp();
  const int rows_left = min(16, q_rows - warp_row0);
  constexpr int kChunksPerRow = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunksPerRow / 32; ++i) {
    const int c = lane + i * 32, row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    if (row < rows_left) {
      const T* src = staged + (col / 64) * (kBlockBytes / sizeof(T)) +
                     wgmma::swizzled_offset(warp_row0 - group_row0 + row, col % 64);
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(warp_row0 + row) * p.out_stride + col) =
          *reinterpret_cast<const uint4*>(src);
    }
  }
  if (t4 == 0) {
    if (g < rows_left) lse[warp_row0 + g] = lse_rows[0];
    if (g + 8 < rows_left) lse[warp_row0 + g + 8] = lse_rows[1];
  }
}

template <typename T, int D, int kStages>
void launch(const Params& p, cudaStream_t stream) {
  using P = Plan<D, kStages>;
  auto kernel = forward_wgmma_kernel<T, D, kStages>;
  static const bool configured = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(P::smem_bytes(true))));
    return true;
  }();
  (void)configured;
  // One dimension of blocks, in launches of at most 2^31 - 1 (one unless batch * heads is huge).
  constexpr int64_t kMaxBlocks = 0x7fffffff;
  const int64_t blocks =
      static_cast<int64_t>(p.batch) * p.heads * ((p.q_len + kBlockQueries - 1) / kBlockQueries);
  const size_t smem = P::smem_bytes(p.dropout_p > 0.0f);
  for (int64_t first = 0; first < blocks; first += kMaxBlocks) {
    const auto count = static_cast<unsigned>(std::min(kMaxBlocks, blocks - first));
    kernel<<<count, kBlockThreads, smem, stream>>>(p, first);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_forward_wgmma(DType dtype, int head_dim, const Params& p, cudaStream_t stream) {
  dispatch(dtype, head_dim, [&](auto type_tag, auto dim_tag) {
    using T = typename decltype(type_tag)::type;
    constexpr int D = decltype(dim_tag)::value;
    // 4 stages: 3 ran 4% slower at d64; 5 gained nothing, and with dropout's keep masks would
    // leave room for one d64 block per SM instead of two.
    launch<T, D, 4>(p, stream);
  });
}

}  // namespace nmt::cuda::flash
