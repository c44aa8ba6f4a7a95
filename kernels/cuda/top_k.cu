// logits_top_k on the GPU (kernels/decode_ops.h): one block per row of logits. Each thread scans a
// strided slice of the row keeping its own k best (logit, id) pairs in registers and its maximum;
// the block then takes the log-sum-exp in two reductions and merges the threads' lists in k rounds
// of a block-wide arg-max. Beam search reads back 2k + 2 numbers per row instead of the row.
#include <climits>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/decode_ops.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/stream.h"
#include "kernels/decode_ops.h"

namespace nmt::cuda {
namespace {

constexpr int kThreads = 256;

// The ranking of candidates: a higher logit first, an equal logit with a lower id first (the CPU
// reference's order). An empty slot is (-inf, INT_MAX): it loses to every real candidate.
__device__ __forceinline__ bool ranks_before(float value, int32_t id, float other_value,
                                             int32_t other_id) {
  return value > other_value || (value == other_value && id < other_id);
}

// A logit as the ranking sees it: NaN (a diverged model) counts as -inf, as on the CPU.
template <typename T>
__device__ __forceinline__ float ranked(T logit) {
  const float v = to_float(logit);
  return isnan(v) ? -INFINITY : v;
}

// Warp-wide arg-max of (value, id) by ranks_before, returned to every lane (butterfly).
__device__ __forceinline__ void warp_best(float& value, int32_t& id) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(0xffffffffu, value, offset);
    const int32_t other_id = __shfl_xor_sync(0xffffffffu, id, offset);
    if (ranks_before(other_value, other_id, value, id)) {
      value = other_value;
      id = other_id;
    }
  }
}

// Block-wide arg-max of (value, id) by ranks_before, returned to every thread. `values` and
// `ids` hold 32 entries each; ends with a barrier, so they may be reused right after.
__device__ __forceinline__ void block_best(float& value, int32_t& id, float* values, int32_t* ids) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  warp_best(value, id);
  if (lane == 0) {
    values[warp] = value;
    ids[warp] = id;
  }
  __syncthreads();
  value = lane < warps ? values[lane] : -INFINITY;
  id = lane < warps ? ids[lane] : INT_MAX;
  warp_best(value, id);
  __syncthreads();
}

// K: the list length compiled in (registers), k <= K: the list length used.
template <typename T, int K>
__global__ void __launch_bounds__(kThreads)
    top_k_rows(const T* __restrict__ logits, int64_t vocab, int k, int32_t extra_id,
               int32_t* __restrict__ top_ids, float* __restrict__ top_logits,
               float* __restrict__ row_stats) {
  __shared__ float shared_values[32];
  __shared__ int32_t shared_ids[32];
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;

  float values[K];
  int32_t ids[K];
#pragma unroll
  for (int i = 0; i < K; ++i) {
    values[i] = -INFINITY;
    ids[i] = INT_MAX;
  }
  float threshold = -INFINITY;  // values[k - 1] once the list is full
  int filled = 0;
  float thread_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = ranked(x[j]);
    thread_max = fmaxf(thread_max, v);
    if (filled == k && !(v > threshold)) continue;  // ids ascend: an equal logit ranks after
    filled += filled < k ? 1 : 0;
    // Insert by carrying the new pair down the sorted list, swapping wherever it ranks first.
    float carry_value = v;
    int32_t carry_id = static_cast<int32_t>(j);
#pragma unroll
    for (int i = 0; i < K; ++i) {
      if (i < k && ranks_before(carry_value, carry_id, values[i], ids[i])) {
        const float value = values[i];
        const int32_t id = ids[i];
        values[i] = carry_value;
        ids[i] = carry_id;
        carry_value = value;
        carry_id = id;
      }
    }
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (i == k - 1) threshold = values[i];
  }

  // Log-sum-exp: the row's maximum, then the sum of exp(v - max) in a fixed order.
  const float row_max = block_max(thread_max, shared_values);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(ranked(x[j]) - row_max);
  sum = block_sum(sum, shared_values);

  // k rounds: the best head of all threads' lists wins; its thread moves to its next entry.
  int head = 0;
  for (int round = 0; round < k; ++round) {
    float value = -INFINITY;
    int32_t id = INT_MAX;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (i == head) {
        value = values[i];
        id = ids[i];
      }
    const int32_t mine = id;
    block_best(value, id, shared_values, shared_ids);
    if (mine == id && id != INT_MAX) ++head;
    if (threadIdx.x == 0) {
      top_ids[row * k + round] = id;
      top_logits[row * k + round] = value;
    }
  }
  if (threadIdx.x == 0) {
    row_stats[2 * row] = row_max + logf(sum);
    row_stats[2 * row + 1] = ranked(x[extra_id]);
  }
}

template <typename T, int K>
void launch(const Tensor& logits, int32_t extra_id, Tensor& top_ids, Tensor& top_logits,
            Tensor& row_stats, cudaStream_t stream) {
  top_k_rows<T, K><<<static_cast<unsigned>(logits.dim(0)), kThreads, 0, stream>>>(
      static_cast<const T*>(logits.data), logits.dim(1), static_cast<int>(top_ids.dim(1)), extra_id,
      static_cast<int32_t*>(top_ids.data), static_cast<float*>(top_logits.data),
      static_cast<float*>(row_stats.data));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void logits_top_k(const Tensor& logits, int32_t extra_id, Tensor& top_ids, Tensor& top_logits,
                  Tensor& row_stats) {
  constexpr const char* op = "logits_top_k";
  detail::require_on_gpu(op, {{"logits", &logits},
                              {"top_ids", &top_ids},
                              {"top_logits", &top_logits},
                              {"row_stats", &row_stats}});
  static_assert(kMaxTopK == 16, "the list lengths compiled below end at kMaxTopK");
  const int64_t k = top_ids.dim(1);
  cudaStream_t stream = current_stream();
  dispatch_float_dtype(logits.dtype, op, "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The shortest compiled list that holds k: greedy search (k = 2) keeps 2 registers per thread.
    if (k <= 2)
      launch<T, 2>(logits, extra_id, top_ids, top_logits, row_stats, stream);
    else if (k <= 8)
      launch<T, 8>(logits, extra_id, top_ids, top_logits, row_stats, stream);
    else
      launch<T, 16>(logits, extra_id, top_ids, top_logits, row_stats, stream);
  });
}

}  // namespace nmt::cuda
