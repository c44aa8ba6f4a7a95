// Token embedding on the GPU. Forward: a [seq_len, d_model] sinusoid table is computed once per
// call (in double, as the CPU does), then each row gathers table[id] * scale + sinusoid (and, with
// the embedding's dropout, drops it out where it stores it: dropout_forward's mask and bits).
// Backward, deterministic without float atomics: a stable radix sort of (id, row) pairs groups the
// rows of each id in row order (or the caller's EmbeddingRowOrder, made off the device, replaces
// the sort); chunks of 32 sorted rows sum their segments (each thread a pack of columns, the
// dropout backward applied to each value as it is read), a segment lying in one chunk is added to
// d_table by that chunk alone, and a segment crossing chunk boundaries is finished by a second
// kernel that adds its chunks' partial sums in chunk order. Keys at or above the vocabulary (pad
// rows) are skipped.
#include <algorithm>
#include <cmath>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"
#include "kernels/sinusoid.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;
constexpr int kChunk = 32;    // sorted rows per chunk of the backward
constexpr int kRowBatch = 8;  // rows a thread of the backward has in flight at once

// The embedding's dropout as the kernels take it (p = 0: none; keep_scale = 1 / (1 - p)).
struct DropoutArgs {
  float p = 0.0f, keep_scale = 1.0f;
  RngKey key{};
};

DropoutArgs dropout_args(const EmbeddingDropout& dropout) {
  if (dropout.p == 0.0f) return DropoutArgs{};
  // The CPU's and dropout_forward's expression, so the kept values match bit for bit.
  return DropoutArgs{dropout.p, 1.0f / (1.0f - dropout.p), dropout.key};
}

// Bit i: whether dropout keeps flat element first + i of VEC (all kept without dropout).
template <int VEC>
__device__ __forceinline__ uint32_t kept_bits(const DropoutArgs& dropout, int64_t first) {
  if (dropout.p == 0.0f) return ~0u;
  return dropout_keep_bits<VEC>(dropout.key, first, dropout.p);
}

// dropout_kernel's value: x times its scale, rounded to T (x itself without dropout). __fmul_rn:
// in f32 nothing rounds between this product and the segment sum's add, which nvcc would
// otherwise contract into one FMA (one rounding where the separate ops round twice).
template <typename T>
__device__ __forceinline__ T dropped(T x, uint32_t keep, int i, const DropoutArgs& dropout) {
  if (dropout.p == 0.0f) return x;
  return from_float<T>(__fmul_rn(to_float(x), dropout_bit_scale(keep, i, dropout.keep_scale)));
}

// positions: [seq_len, d_model] f32 (kernels/sinusoid.h).
__global__ void sinusoid_table(float* __restrict__ positions, int64_t seq_len, int64_t d_model) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= seq_len * d_model) return;
  positions[index] = sinusoid_value(index / d_model, index % d_model, d_model);
}

// One block per row, threads over packs of VEC columns (VEC 1, 4 or 8: dropout_keep_bits' packs,
// from a multiple of VEC when VEC > 1).
template <typename T, int VEC>
__global__ void embedding_gather(const int32_t* __restrict__ ids, const T* __restrict__ table,
                                 const float* __restrict__ positions, T* __restrict__ out,
                                 int64_t vocab, int64_t d_model, int64_t seq_len, float scale,
                                 int32_t pad_id, DropoutArgs dropout) {
  using P = Pack<T, VEC>;
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  const bool zero = id == pad_id || id < 0 || id >= vocab;
  const int64_t packs = d_model / VEC;
  P* out_row = reinterpret_cast<P*>(out + row * d_model);
  const P* table_row =
      reinterpret_cast<const P*>(table + static_cast<int64_t>(zero ? 0 : id) * d_model);
  const float* position_row = positions + (row % seq_len) * d_model;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    P result;
    if (zero) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) result.v[i] = from_float<T>(0.0f);
    } else {
      const P value = table_row[p];
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        result.v[i] = from_float<T>(to_float(value.v[i]) * scale + position_row[p * VEC + i]);
      // The dropout of the rounded value, as dropout_forward does to the stored row.
      const uint32_t keep = kept_bits<VEC>(dropout, row * d_model + p * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) result.v[i] = dropped(result.v[i], keep, i, dropout);
    }
    out_row[p] = result;
  }
}

// Sort keys: the id, or `sentinel` (= vocab, sorted last and skipped) for pad and invalid ids.
__global__ void sort_keys(const int32_t* __restrict__ ids, int64_t rows, int64_t vocab,
                          int32_t pad_id, uint32_t* __restrict__ keys,
                          int32_t* __restrict__ values) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const int32_t id = ids[i];
  keys[i] = (id == pad_id || id < 0 || id >= vocab) ? static_cast<uint32_t>(vocab)
                                                    : static_cast<uint32_t>(id);
  values[i] = static_cast<int32_t>(i);
}

// grid (chunks, column tiles); each thread a pack of VEC columns (VEC 1, 4 or 8, d_model a multiple
// of VEC; d_table and partials 16-byte aligned where VEC > 1). partials: [chunks, 2, d_model]; slot
// 0 holds the chunk's first segment when it began in an earlier chunk, slot 1 its last segment when
// it goes on past it. A column's segment sum adds its rows' values in sorted order, each value the
// dropout backward's rounded one (dropout_kernel's) when there is dropout: the same sums for every
// VEC, with or without the dropout fused. A segment that lies within the chunk adds scale * its sum
// into d_table with an atomic add that returns nothing (RED): an id's segment is one per launch and
// its row is added to by one thread a column, so there is one add per element here and the result
// is the plain add's, deterministic. A load-add-store there made each segment wait for its row's
// load before the next segment could start: with random ids nearly every row ends a segment, and a
// thread's 32 rows were a chain of 32 global round trips (35 us a launch at 8192 x 512 bf16).
template <typename T, int VEC>
__global__ void segment_sums(const uint32_t* __restrict__ sorted_ids,
                             const int32_t* __restrict__ sorted_rows, const T* __restrict__ d_out,
                             float* __restrict__ d_table, float* __restrict__ partials, int64_t n,
                             int64_t d_model, uint32_t sentinel, float scale, DropoutArgs dropout) {
  using P = Pack<T, VEC>;
  __shared__ uint32_t chunk_ids[kChunk];
  __shared__ int32_t chunk_rows[kChunk];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int count = n - begin < kChunk ? static_cast<int>(n - begin) : kChunk;
  if (threadIdx.x < count) {
    chunk_ids[threadIdx.x] = sorted_ids[begin + threadIdx.x];
    chunk_rows[threadIdx.x] = sorted_rows[begin + threadIdx.x];
  }
  __syncthreads();
  const int64_t col = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (col >= d_model) return;
  const bool first_continues = begin > 0 && sorted_ids[begin - 1] == chunk_ids[0];
  const bool last_continues =
      begin + count < n && sorted_ids[begin + count] == chunk_ids[count - 1];
  // Adds the finished segment's sums where they go: d_table, or a partial slot.
  const auto store = [&](const float(&sum)[VEC], uint32_t id, bool began_before, bool goes_on) {
    if (id >= sentinel) return;  // pad (the device sort's key vocab, or an order's larger one)
    if (!began_before && !goes_on) {
      float* at = d_table + static_cast<int64_t>(id) * d_model + col;
      if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 4)
          atomicAdd(reinterpret_cast<float4*>(at + i),
                    make_float4(scale * sum[i], scale * sum[i + 1], scale * sum[i + 2],
                                scale * sum[i + 3]));
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) atomicAdd(at + i, scale * sum[i]);
      }
    } else {
      float* at = partials +
                  (static_cast<int64_t>(blockIdx.x) * 2 + (began_before ? 0 : 1)) * d_model + col;
#pragma unroll
      for (int i = 0; i < VEC; ++i) at[i] = sum[i];
    }
  };
  float sum[VEC] = {};
  int segment_begin = 0;
  for (int j0 = 0; j0 < count; j0 += kRowBatch) {
    // The batch's loads first, so they are in flight together.
    P values[kRowBatch];
#pragma unroll
    for (int b = 0; b < kRowBatch; ++b)
      if (j0 + b < count)
        values[b] = *reinterpret_cast<const P*>(
            d_out + static_cast<int64_t>(chunk_rows[j0 + b]) * d_model + col);
#pragma unroll
    for (int b = 0; b < kRowBatch; ++b) {
      const int j = j0 + b;
      if (j >= count) break;
      const uint32_t keep =
          kept_bits<VEC>(dropout, static_cast<int64_t>(chunk_rows[j]) * d_model + col);
#pragma unroll
      for (int i = 0; i < VEC; ++i) sum[i] += to_float(dropped(values[b].v[i], keep, i, dropout));
      const uint32_t id = chunk_ids[j];
      if (j + 1 == count || chunk_ids[j + 1] != id) {
        store(sum, id, segment_begin == 0 && first_continues, j + 1 == count && last_continues);
#pragma unroll
        for (int i = 0; i < VEC; ++i) sum[i] = 0.0f;
        segment_begin = j + 1;
      }
    }
  }
}

// grid (chunks, column tiles): the chunk where a crossing segment begins adds the partial sums of
// every chunk it spans, in chunk order.
__global__ void finish_crossing_segments(const uint32_t* __restrict__ sorted_ids,
                                         const float* __restrict__ partials,
                                         float* __restrict__ d_table, int64_t n, int64_t d_model,
                                         uint32_t sentinel, float scale) {
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * kChunk, end = min(n, begin + kChunk);
  if (end >= n) return;
  const uint32_t id = sorted_ids[end - 1];
  if (sorted_ids[end] != id || id >= sentinel) return;  // no segment crosses this chunk's end
  // Sorted ids: the segment began in this chunk unless the whole chunk (and the row before) is id.
  if (begin > 0 && sorted_ids[begin] == id && sorted_ids[begin - 1] == id) return;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (col >= d_model) return;
  float sum = partials[(chunk * 2 + 1) * d_model + col];
  for (int64_t next = chunk + 1;; ++next) {
    sum += partials[(next * 2 + 0) * d_model + col];
    const int64_t next_end = min(n, (next + 1) * kChunk);
    if (next_end >= n || sorted_ids[next_end] != id) break;
  }
  d_table[static_cast<int64_t>(id) * d_model + col] += scale * sum;
}

int bits_for(uint64_t max_value) {
  int bits = 1;
  while (bits < 32 && (max_value >> bits) != 0) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, Tensor& out, int64_t seq_len,
                       float scale, int32_t pad_id, const EmbeddingDropout& dropout) {
  constexpr const char* op = "embedding_forward";
  detail::require_rank(op, "ids", ids, 1);
  detail::require_rank(op, "table", table, 2);
  const int64_t rows = ids.dim(0), vocab = table.dim(0), d_model = table.dim(1);
  check_shape(op, "out", out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  detail::require_same_dtype(op, "out", out, "table", table);
  detail::require_on_gpu(op, {{"ids", &ids}, {"table", &table}, {"out", &out}});
  detail::require_dropout_p(op, dropout.p);
  if (seq_len <= 0 || rows % seq_len != 0)
    throw std::invalid_argument(std::string(op) + ": rows " + std::to_string(rows) +
                                " is not a multiple of seq_len " + std::to_string(seq_len));
  if (rows == 0 || d_model == 0) return;
  cudaStream_t stream = current_stream();
  auto* positions = static_cast<float*>(
      stream_resources(stream).scratch(static_cast<size_t>(seq_len * d_model) * sizeof(float)));
  sinusoid_table<<<blocks_for(seq_len * d_model, kThreads), kThreads, 0, stream>>>(
      positions, seq_len, d_model);
  CUDA_CHECK_LAUNCH();
  const auto* id_data = static_cast<const int32_t*>(ids.data);
  const DropoutArgs drop = dropout_args(dropout);
  dispatch_float_dtype(table.dtype, op, "table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int vec = kPackWidth<T>;
    const T* table_data = static_cast<const T*>(table.data);
    T* out_data = static_cast<T*>(out.data);
    const unsigned grid = static_cast<unsigned>(rows);
    if (d_model % vec == 0 && is_aligned16(table.data) && is_aligned16(out.data)) {
      const int threads =
          static_cast<int>(std::min<int64_t>(kThreads, (d_model / vec + 31) / 32 * 32));
      embedding_gather<T, vec><<<grid, threads, 0, stream>>>(
          id_data, table_data, positions, out_data, vocab, d_model, seq_len, scale, pad_id, drop);
    } else {
      const int threads = static_cast<int>(std::min<int64_t>(kThreads, (d_model + 31) / 32 * 32));
      embedding_gather<T, 1><<<grid, threads, 0, stream>>>(
          id_data, table_data, positions, out_data, vocab, d_model, seq_len, scale, pad_id, drop);
    }
    CUDA_CHECK_LAUNCH();
  });
}

void embedding_backward(const Tensor& ids, const Tensor& d_out, Tensor& d_table, float scale,
                        int32_t pad_id, const EmbeddingDropout& dropout,
                        const EmbeddingRowOrder* order) {
  constexpr const char* op = "embedding_backward";
  detail::require_rank(op, "ids", ids, 1);
  detail::require_rank(op, "d_table", d_table, 2);
  const int64_t rows = ids.dim(0), vocab = d_table.dim(0), d_model = d_table.dim(1);
  check_shape(op, "d_out", d_out, {rows, d_model});
  detail::require_dtype(op, "ids", ids, DType::i32);
  detail::require_dtype(op, "d_table", d_table, DType::f32);
  detail::require_on_gpu(op, {{"ids", &ids}, {"d_out", &d_out}, {"d_table", &d_table}});
  detail::require_dropout_p(op, dropout.p);
  if (order != nullptr) {
    check_shape(op, "order.keys", order->keys, {rows});
    check_shape(op, "order.rows", order->rows, {rows});
    detail::require_dtype(op, "order.keys", order->keys, DType::i32);
    detail::require_dtype(op, "order.rows", order->rows, DType::i32);
    detail::require_on_gpu(op, {{"order.keys", &order->keys}, {"order.rows", &order->rows}});
  }
  if (rows == 0 || d_model == 0) return;
  if (rows > INT32_MAX || vocab >= INT32_MAX)
    throw std::invalid_argument(std::string(op) + ": too many rows or too large a vocabulary");
  cudaStream_t stream = current_stream();
  const int end_bit = bits_for(static_cast<uint64_t>(vocab));  // the sentinel vocab included
  const int64_t chunks = (rows + kChunk - 1) / kChunk;

  // Without the caller's order: sort (id, row) pairs here, into the scratch beside the partials.
  const size_t sorted = order == nullptr ? static_cast<size_t>(rows) : 0;
  size_t sort_bytes = 0;
  if (order == nullptr)
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
        static_cast<int>(rows), 0, end_bit, stream));
  ScratchLayout layout;
  const size_t keys_in_offset = layout.add(sorted * sizeof(uint32_t));
  const size_t keys_out_offset = layout.add(sorted * sizeof(uint32_t));
  const size_t rows_in_offset = layout.add(sorted * sizeof(int32_t));
  const size_t rows_out_offset = layout.add(sorted * sizeof(int32_t));
  const size_t sort_offset = layout.add(sort_bytes);
  const size_t partials_offset =
      layout.add(static_cast<size_t>(chunks * 2 * d_model) * sizeof(float));
  void* base = stream_resources(stream).scratch(layout.total());
  float* partials = at_offset<float>(base, partials_offset);
  // An order's keys are non-negative i32, so read as u32 they are the same values.
  const uint32_t* sorted_ids = order ? static_cast<const uint32_t*>(order->keys.data)
                                     : at_offset<uint32_t>(base, keys_out_offset);
  const int32_t* sorted_rows = order ? static_cast<const int32_t*>(order->rows.data)
                                     : at_offset<int32_t>(base, rows_out_offset);
  if (order == nullptr) {
    uint32_t* keys_in = at_offset<uint32_t>(base, keys_in_offset);
    int32_t* rows_in = at_offset<int32_t>(base, rows_in_offset);
    sort_keys<<<blocks_for(rows, kThreads), kThreads, 0, stream>>>(
        static_cast<const int32_t*>(ids.data), rows, vocab, pad_id, keys_in, rows_in);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(at_offset<void>(base, sort_offset), sort_bytes,
                                               keys_in, at_offset<uint32_t>(base, keys_out_offset),
                                               rows_in, at_offset<int32_t>(base, rows_out_offset),
                                               static_cast<int>(rows), 0, end_bit, stream));
  }
  const uint32_t sentinel = static_cast<uint32_t>(vocab);
  float* table_grad = static_cast<float*>(d_table.data);
  const DropoutArgs drop = dropout_args(dropout);
  dispatch_float_dtype(d_out.dtype, op, "d_out", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int vec = kPackWidth<T>;
    const T* grad = static_cast<const T*>(d_out.data);
    const auto launch = [&](auto kernel, int64_t packs) {
      const int threads =
          static_cast<int>(std::min<int64_t>(kColumnThreads, (packs + 31) / 32 * 32));
      const dim3 grid(static_cast<unsigned>(chunks), blocks_for(packs, threads));
      kernel<<<grid, threads, 0, stream>>>(sorted_ids, sorted_rows, grad, table_grad, partials,
                                           rows, d_model, sentinel, scale, drop);
      CUDA_CHECK_LAUNCH();
    };
    if (d_model % vec == 0 && is_aligned16(d_out.data) && is_aligned16(d_table.data) &&
        is_aligned16(partials))
      launch(segment_sums<T, vec>, d_model / vec);
    else
      launch(segment_sums<T, 1>, d_model);
  });
  const dim3 grid(static_cast<unsigned>(chunks), blocks_for(d_model, kColumnThreads));
  finish_crossing_segments<<<grid, kColumnThreads, 0, stream>>>(sorted_ids, partials, table_grad,
                                                                rows, d_model, sentinel, scale);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nmt::cuda
