// cached_attention on the GPU (kernels/decode_ops.h): one block per (query row, head) does a
// decoder step's whole attention over cached keys and values — scores, softmax, weighted sum — in
// one launch. The general attention_forward takes five launches for it (pointer table, two batched
// GEMMs, softmax, the probabilities' rounding), which at a step's few rows cost more than their
// work: a step runs twelve attentions. The arithmetic follows that path: scores are the f32 dot
// product times the scale, the softmax is normalised in f32 and rounded to the activation dtype,
// and the weighted sum adds those rounded probabilities times the values in f32. Only the order of
// the additions differs (the GEMMs' is cuBLAS's), so the two agree to f32 rounding in every dtype;
// decoded text does not move with the kernel.
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/stream.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 128;

// grid (rows, heads). Shared memory (at most kCachedAttentionSharedLimit): the query's head slice
// (f32), the scores of every visible position, 32 floats for the block reductions, and
// the weighted-sum partials of each position group.
//   Scores: thread t takes positions t, t + 128, ...; each reads its key row whole (16-byte loads
//   where the head's slice allows), so a step's positions are read in parallel, not one at a time.
//   Weighted sum: thread t adds dimension t % head_dim over the positions of group t / head_dim (a
//   warp reads consecutive elements of one value row), then the groups are added in order.
template <typename T, bool kVectorKeys>
__global__ void cached_attention_kernel(const T* __restrict__ q, const T* __restrict__ keys,
                                        const T* __restrict__ values,
                                        const int32_t* __restrict__ lengths, T* __restrict__ out,
                                        int64_t q_stride, int64_t queries, int64_t length,
                                        int head_dim, int width, float scale) {
  extern __shared__ float shared[];
  const int64_t row = blockIdx.x, block = row / queries;
  const int head = blockIdx.y, t = threadIdx.x;
  const int groups = head_dim < kThreads ? kThreads / head_dim : 1;
  float* q_s = shared;                            // [head_dim]
  float* reduce_s = q_s + head_dim;               // [32]
  float* partial_s = reduce_s + 32;               // [groups, head_dim]
  float* scores = partial_s + groups * head_dim;  // [length]

  const int64_t visible = min(static_cast<int64_t>(max(lengths[block], 0)), length);
  T* out_row = out + row * width + static_cast<int64_t>(head) * head_dim;
  if (visible == 0) {  // every key masked: a zero row, as the general path gives
    for (int d = t; d < head_dim; d += kThreads) out_row[d] = from_float<T>(0.0f);
    return;
  }
  const T* q_row = q + row * q_stride + static_cast<int64_t>(head) * head_dim;
  for (int d = t; d < head_dim; d += kThreads) q_s[d] = to_float(q_row[d]);
  __syncthreads();

  const int64_t stride = static_cast<int64_t>(length) * width;  // one block's cached rows
  const T* k_base = keys + block * stride + static_cast<int64_t>(head) * head_dim;
  const T* v_base = values + block * stride + static_cast<int64_t>(head) * head_dim;
  float local_max = -INFINITY;
  for (int64_t p = t; p < visible; p += kThreads) {
    const T* k_row = k_base + p * width;
    float dot = 0.0f;
    if constexpr (kVectorKeys) {
      constexpr int kPack = kPackWidth<T>;
      for (int d = 0; d < head_dim; d += kPack) {
        const Pack<T, kPack> k = *reinterpret_cast<const Pack<T, kPack>*>(k_row + d);
#pragma unroll
        for (int j = 0; j < kPack; ++j) dot += q_s[d + j] * to_float(k.v[j]);
      }
    } else {
      for (int d = 0; d < head_dim; ++d) dot += q_s[d] * to_float(k_row[d]);
    }
    scores[p] = dot * scale;
    local_max = fmaxf(local_max, dot * scale);
  }
  const float row_max = block_max(local_max, reduce_s);  // ends with a barrier: scores visible
  float local_sum = 0.0f;
  for (int64_t p = t; p < visible; p += kThreads) {
    const float e = expf(scores[p] - row_max);
    scores[p] = e;
    local_sum += e;
  }
  const float inv_sum = 1.0f / block_sum(local_sum, reduce_s);

  for (int d0 = 0; d0 < head_dim; d0 += kThreads) {
    const int d = d0 + t % head_dim, group = t / head_dim;
    if (group < groups && d < head_dim) {
      float acc = 0.0f;
      for (int64_t p = group; p < visible; p += groups) {
        const float probability = to_float(from_float<T>(scores[p] * inv_sum));
        acc += probability * to_float(v_base[p * width + d]);
      }
      partial_s[group * head_dim + d] = acc;
    }
    __syncthreads();
    if (t < head_dim && d0 + t < head_dim) {
      float sum = 0.0f;
      for (int g = 0; g < groups; ++g) sum += partial_s[g * head_dim + d0 + t];
      out_row[d0 + t] = from_float<T>(sum);
    }
    __syncthreads();
  }
}

}  // namespace

size_t cached_attention_shared_bytes(int64_t head_dim, int64_t length) {
  const int64_t groups = head_dim < kThreads ? kThreads / head_dim : 1;
  return static_cast<size_t>(head_dim + 32 + groups * head_dim + length) * sizeof(float);
}

void cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values,
                      const Tensor& lengths, Tensor& out, int64_t heads, int64_t q_col) {
  const int64_t rows = q.dim(0), blocks = keys.dim(0), length = keys.dim(1), width = keys.dim(2);
  const int64_t head_dim = width / heads;
  cudaStream_t stream = current_stream();
  const size_t shared = cached_attention_shared_bytes(head_dim, length);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(heads));
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  dispatch_float_dtype(q.dtype, "cached_attention", "q", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // 16-byte key loads when every head's slice of every row starts on a 16-byte boundary.
    const bool vector =
        head_dim % kPackWidth<T> == 0 && width % kPackWidth<T> == 0 && is_aligned16(keys.data);
    auto launch = [&](auto kernel) {
      kernel<<<grid, kThreads, shared, stream>>>(
          static_cast<const T*>(q.data) + q_col, static_cast<const T*>(keys.data),
          static_cast<const T*>(values.data), static_cast<const int32_t*>(lengths.data),
          static_cast<T*>(out.data), q.dim(1), rows / blocks, length, static_cast<int>(head_dim),
          static_cast<int>(width), scale);
      CUDA_CHECK_LAUNCH();
    };
    if (vector)
      launch(cached_attention_kernel<T, true>);
    else
      launch(cached_attention_kernel<T, false>);
  });
}

}  // namespace nmt::cuda
