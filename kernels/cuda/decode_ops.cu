// Incremental-decoding ops on the GPU: the embedding at each row's position (its sinusoid computed
// with the function embedding.cu tabulates, so both give the same bits), the cache write at each
// row's position and the block gather as copy kernels over the widest word the layout allows.
// Positions are read from device memory, never baked into a launch: a captured decoder step
// replays at any position.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"
#include "kernels/sinusoid.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row, threads over columns (decoding rows are few and short). Each element's
// sinusoid is computed where it is used: no table, no scratch, one launch.
template <typename T>
__global__ void embedding_gather_at(const int32_t* __restrict__ ids,
                                    const int32_t* __restrict__ positions,
                                    const T* __restrict__ table, T* __restrict__ out, int64_t vocab,
                                    int64_t d_model, float scale, int32_t pad_id) {
  const int64_t row = blockIdx.x;
  const int32_t id = ids[row];
  const int64_t position = positions[row];
  const bool zero = id == pad_id || id < 0 || id >= vocab;
  const T* table_row = table + static_cast<int64_t>(zero ? 0 : id) * d_model;
  T* out_row = out + row * d_model;
  for (int64_t d = threadIdx.x; d < d_model; d += blockDim.x) {
    if (zero) {
      out_row[d] = from_float<T>(0.0f);
      continue;
    }
    // The float embedding_forward reads from its table, then its multiply-add.
    const float sinusoid = sinusoid_value(position, d, d_model);
    out_row[d] = from_float<T>(to_float(table_row[d]) * scale + sinusoid);
  }
}

// grid (rows, column blocks): row r's `words` words (its row starts x_stride words apart) land in
// its block at position positions[r].
template <typename W>
__global__ void write_position_words(const W* __restrict__ x, int64_t x_stride,
                                     const int32_t* __restrict__ positions, W* __restrict__ cache,
                                     int64_t cache_len, int64_t words) {
  const int64_t row = blockIdx.x;
  const int32_t position = positions[row];
  if (position < 0 || position >= cache_len) return;
  const W* from = x + row * x_stride;
  W* to = cache + (row * cache_len + position) * words;
  for (int64_t w = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.y) * blockDim.x)
    to[w] = from[w];
}

// grid (n, column blocks): block i copies `words` words of block index[i].
template <typename W>
__global__ void gather_words(const W* __restrict__ src, const int32_t* __restrict__ index,
                             int64_t src_blocks, W* __restrict__ dst, int64_t block_words,
                             int64_t words) {
  const int64_t i = blockIdx.x;
  const int32_t from = index[i];
  if (from < 0 || from >= src_blocks) return;
  const W* src_block = src + static_cast<int64_t>(from) * block_words;
  W* dst_block = dst + i * block_words;
  for (int64_t w = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; w < words;
       w += static_cast<int64_t>(gridDim.y) * blockDim.x)
    dst_block[w] = src_block[w];
}

template <typename W>
void launch_gather(const Tensor& src, const Tensor& index, Tensor& dst, size_t block_bytes,
                   size_t used_bytes, cudaStream_t stream) {
  const auto block_words = static_cast<int64_t>(block_bytes / sizeof(W));
  const auto words = static_cast<int64_t>(used_bytes / sizeof(W));
  const unsigned column_blocks = std::min<unsigned>(blocks_for(words, kThreads), 64);
  const dim3 grid(static_cast<unsigned>(index.dim(0)), column_blocks);
  gather_words<W><<<grid, kThreads, 0, stream>>>(
      static_cast<const W*>(src.data), static_cast<const int32_t*>(index.data), src.dim(0),
      static_cast<W*>(dst.data), block_words, words);
  CUDA_CHECK_LAUNCH();
}

// Threads for `words` words a block: whole warps, at most kThreads.
int threads_for(int64_t words) {
  return static_cast<int>(std::clamp<int64_t>((words + 31) / 32 * 32, 32, kThreads));
}

template <typename W>
void launch_write_position(const void* x, size_t x_stride_bytes, const Tensor& positions,
                           Tensor& cache, int64_t rows, size_t row_bytes, cudaStream_t stream) {
  const auto words = static_cast<int64_t>(row_bytes / sizeof(W));
  const int threads = threads_for(words);
  const unsigned column_blocks = std::min<unsigned>(blocks_for(words, threads), 64);
  const dim3 grid(static_cast<unsigned>(rows), column_blocks);
  write_position_words<W><<<grid, threads, 0, stream>>>(
      static_cast<const W*>(x), static_cast<int64_t>(x_stride_bytes / sizeof(W)),
      static_cast<const int32_t*>(positions.data), static_cast<W*>(cache.data), cache.dim(1),
      words);
  CUDA_CHECK_LAUNCH();
}

bool multiple_of(size_t bytes, const void* a, const void* b, size_t word) {
  return bytes % word == 0 && reinterpret_cast<uintptr_t>(a) % word == 0 &&
         reinterpret_cast<uintptr_t>(b) % word == 0;
}

}  // namespace

void embedding_forward_at(const Tensor& ids, const Tensor& positions, const Tensor& table,
                          Tensor& out, float scale, int32_t pad_id) {
  constexpr const char* op = "embedding_forward_at";
  detail::require_same_dtype(op, "out", out, "table", table);
  detail::require_on_gpu(
      op, {{"ids", &ids}, {"positions", &positions}, {"table", &table}, {"out", &out}});
  const int64_t rows = ids.dim(0), vocab = table.dim(0), d_model = table.dim(1);
  if (rows == 0 || d_model == 0) return;
  const int threads = threads_for(d_model);
  dispatch_float_dtype(table.dtype, op, "table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_gather_at<T><<<static_cast<unsigned>(rows), threads, 0, current_stream()>>>(
        static_cast<const int32_t*>(ids.data), static_cast<const int32_t*>(positions.data),
        static_cast<const T*>(table.data), static_cast<T*>(out.data), vocab, d_model, scale,
        pad_id);
    CUDA_CHECK_LAUNCH();
  });
}

void cache_write_position(const Tensor& x, const Tensor& positions, Tensor& cache, int64_t x_col) {
  constexpr const char* op = "cache_write_position";
  detail::require_on_gpu(op, {{"x", &x}, {"positions", &positions}, {"cache", &cache}});
  const size_t element = dtype_size(x.dtype);
  const size_t row_bytes = static_cast<size_t>(cache.dim(2)) * element;
  const size_t x_stride = static_cast<size_t>(x.dim(1)) * element;
  const void* from = static_cast<const char*>(x.data) + static_cast<size_t>(x_col) * element;
  cudaStream_t stream = current_stream();
  // Every row start (in x and in the cache) and x's row stride must be whole words of the width
  // chosen.
  auto fits = [&](size_t word) {
    return multiple_of(row_bytes, from, cache.data, word) && x_stride % word == 0;
  };
  const int64_t rows = x.dim(0);
  if (fits(16))
    launch_write_position<uint4>(from, x_stride, positions, cache, rows, row_bytes, stream);
  else if (fits(4))
    launch_write_position<uint32_t>(from, x_stride, positions, cache, rows, row_bytes, stream);
  else
    launch_write_position<uint16_t>(from, x_stride, positions, cache, rows, row_bytes, stream);
}

void gather_blocks(const Tensor& src, const Tensor& index, Tensor& dst, int64_t used_len) {
  constexpr const char* op = "gather_blocks";
  detail::require_on_gpu(op, {{"src", &src}, {"index", &index}, {"dst", &dst}});
  const size_t row_bytes = static_cast<size_t>(src.dim(2)) * dtype_size(src.dtype);
  const size_t block_bytes = static_cast<size_t>(src.dim(1)) * row_bytes;
  const size_t used_bytes = static_cast<size_t>(used_len) * row_bytes;
  cudaStream_t stream = current_stream();
  // Every block start and the used length must be whole words of the width chosen.
  auto fits = [&](size_t word) {
    return multiple_of(block_bytes, src.data, dst.data, word) && used_bytes % word == 0;
  };
  if (fits(16))
    launch_gather<uint4>(src, index, dst, block_bytes, used_bytes, stream);
  else if (fits(4))
    launch_gather<uint32_t>(src, index, dst, block_bytes, used_bytes, stream);
  else
    launch_gather<uint16_t>(src, index, dst, block_bytes, used_bytes, stream);
}

}  // namespace nmt::cuda
