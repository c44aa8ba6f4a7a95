// Fused softmax cross-entropy with label smoothing on the GPU: one block per row. Pass 1 reads the
// row once, keeping an online (max, sum of exp) pair, the sum of the logits and the argmax; rows
// of up to 8 packs per thread stay in registers for pass 2, longer rows are read again (from L2).
// Pass 2 writes grad_scale * (softmax - q) in the logits' dtype, never materialising fp32
// probabilities. Per-row results are summed in a fixed order by one block, in double.
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kSumThreads = 1024;

enum RowStatus : int { kPadRow = 0, kWrongRow = 1, kCorrectRow = 2, kBadTarget = 3 };

struct RowLoss {
  float loss;
  float nll;
  int status;
};

struct DeviceSums {
  double loss;
  double nll;
  long long tokens;
  long long correct;
  long long bad_rows;
  long long first_bad_row;
  long long first_bad_target;
};

// The larger (value, index), the lower index on ties: the first maximum, as the CPU picks.
__device__ __forceinline__ void keep_better(float& value, int& index, float other_value,
                                            int other_index) {
  if (other_value > value || (other_value == value && other_index < index)) {
    value = other_value;
    index = other_index;
  }
}

__device__ void block_argmax(float& value, int& index, float* shared_values, int* shared_indices) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    keep_better(value, index, __shfl_xor_sync(0xffffffffu, value, offset),
                __shfl_xor_sync(0xffffffffu, index, offset));
  if (lane == 0) {
    shared_values[warp] = value;
    shared_indices[warp] = index;
  }
  __syncthreads();
  value = lane < warps ? shared_values[lane] : -INFINITY;
  index = lane < warps ? shared_indices[lane] : INT_MAX;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    keep_better(value, index, __shfl_xor_sync(0xffffffffu, value, offset),
                __shfl_xor_sync(0xffffffffu, index, offset));
  __syncthreads();
}

template <typename T, int VEC>
__device__ __forceinline__ void zero_row(T* row, int64_t packs) {
  Pack<T, VEC> zeros;
#pragma unroll
  for (int i = 0; i < VEC; ++i) zeros.v[i] = from_float<T>(0.0f);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x)
    reinterpret_cast<Pack<T, VEC>*>(row)[p] = zeros;
}

// Per-thread running statistics of pass 1.
struct Running {
  float max = -INFINITY;  // running max of the logits seen
  float sum = 0.0f;       // sum of exp(logit - max)
  float total = 0.0f;     // sum of the logits
  float best = -INFINITY;
  int best_index = INT_MAX;
};

template <typename T, int VEC>
__device__ __forceinline__ void accumulate_pack(Running& run, const Pack<T, VEC>& pack,
                                                int64_t first_index) {
  float values[VEC];
  float pack_max = -INFINITY;
  int pack_arg = 0;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    values[i] = to_float(pack.v[i]);
    if (values[i] > pack_max) {
      pack_max = values[i];
      pack_arg = i;
    }
  }
  if (pack_max > run.max) {
    run.sum *= __expf(run.max - pack_max);
    run.max = pack_max;
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    run.sum += __expf(values[i] - run.max);
    run.total += values[i];
  }
  // Packs come in increasing index order per thread, so a strict > keeps the first maximum.
  if (pack_max > run.best) {
    run.best = pack_max;
    run.best_index = static_cast<int>(first_index) + pack_arg;
  }
}

// CACHE > 0: each thread keeps its (at most CACHE) packs in registers between the passes.
template <typename T, int VEC, int CACHE>
__global__ void __launch_bounds__(kMaxThreads, 1)
    cross_entropy_rows(const T* logits, const int32_t* __restrict__ targets, T* d_logits,
                       int64_t vocab, int32_t pad_id, float smoothing, float grad_scale,
                       RowLoss* __restrict__ row_losses) {
  using P = Pack<T, VEC>;
  __shared__ float shared[32];
  __shared__ int shared_indices[32];
  const int64_t row = blockIdx.x;
  const int64_t packs = vocab / VEC;
  const P* in = reinterpret_cast<const P*>(logits + row * vocab);
  T* out = d_logits ? d_logits + row * vocab : nullptr;
  const int32_t target = targets[row];
  if (target == pad_id || target < 0 || target >= vocab) {
    if (out) zero_row<T, VEC>(out, packs);
    if (threadIdx.x == 0)
      row_losses[row] = RowLoss{0.0f, 0.0f, target == pad_id ? kPadRow : kBadTarget};
    return;
  }
  // Read before any thread writes the row (the writes come after the barriers below).
  const float target_logit = to_float(logits[row * vocab + target]);

  Running run;
  P cache[CACHE > 0 ? CACHE : 1];
  if constexpr (CACHE > 0) {
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int64_t p = c * blockDim.x + threadIdx.x;
      if (p < packs) cache[c] = in[p];
    }
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int64_t p = c * blockDim.x + threadIdx.x;
      if (p < packs) accumulate_pack(run, cache[c], p * VEC);
    }
  } else {
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) accumulate_pack(run, in[p], p * VEC);
  }

  const float row_max = block_max(run.max, shared);
  const float sum_exp =
      block_sum(run.max == -INFINITY ? 0.0f : run.sum * __expf(run.max - row_max), shared);
  const float sum_logits = block_sum(run.total, shared);
  block_argmax(run.best, run.best_index, shared, shared_indices);
  const float log_sum_exp = row_max + logf(sum_exp);
  if (threadIdx.x == 0) {
    const float nll = log_sum_exp - target_logit;
    const float loss = log_sum_exp - (1.0f - smoothing) * target_logit -
                       smoothing / static_cast<float>(vocab) * sum_logits;
    row_losses[row] = RowLoss{loss, nll, run.best_index == target ? kCorrectRow : kWrongRow};
  }
  if (!out) return;

  const float off_target = smoothing / static_cast<float>(vocab);
  const float on_target = 1.0f - smoothing + off_target;
  auto gradient = [&](const P& pack, int64_t p) {
    P g;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float q = p * VEC + i == target ? on_target : off_target;
      g.v[i] = from_float<T>(grad_scale * (__expf(to_float(pack.v[i]) - log_sum_exp) - q));
    }
    reinterpret_cast<P*>(out)[p] = g;
  };
  if constexpr (CACHE > 0) {
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
      const int64_t p = c * blockDim.x + threadIdx.x;
      if (p < packs) gradient(cache[c], p);
    }
  } else {
    // In place: each element is read and then written by the same thread.
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) gradient(in[p], p);
  }
}

// One block adds the rows' results in a fixed order (thread-strided, then a fixed tree).
__global__ void __launch_bounds__(kSumThreads)
    sum_row_losses(const RowLoss* __restrict__ row_losses, const int32_t* __restrict__ targets,
                   int64_t rows, DeviceSums* __restrict__ sums) {
  __shared__ double shared_loss[kSumThreads], shared_nll[kSumThreads];
  __shared__ long long shared_tokens[kSumThreads], shared_correct[kSumThreads],
      shared_bad[kSumThreads], shared_first_bad[kSumThreads];
  double loss = 0, nll = 0;
  long long tokens = 0, correct = 0, bad = 0, first_bad = LLONG_MAX;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const RowLoss row = row_losses[r];
    if (row.status == kBadTarget) {
      ++bad;
      first_bad = first_bad < r ? first_bad : r;
    } else if (row.status != kPadRow) {
      loss += row.loss;
      nll += row.nll;
      ++tokens;
      correct += row.status == kCorrectRow;
    }
  }
  const int t = threadIdx.x;
  shared_loss[t] = loss;
  shared_nll[t] = nll;
  shared_tokens[t] = tokens;
  shared_correct[t] = correct;
  shared_bad[t] = bad;
  shared_first_bad[t] = first_bad;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      shared_loss[t] += shared_loss[t + half];
      shared_nll[t] += shared_nll[t + half];
      shared_tokens[t] += shared_tokens[t + half];
      shared_correct[t] += shared_correct[t + half];
      shared_bad[t] += shared_bad[t + half];
      shared_first_bad[t] = min(shared_first_bad[t], shared_first_bad[t + half]);
    }
    __syncthreads();
  }
  if (t == 0) {
    const long long first = shared_first_bad[0];
    *sums = DeviceSums{shared_loss[0],
                       shared_nll[0],
                       shared_tokens[0],
                       shared_correct[0],
                       shared_bad[0],
                       first,
                       first == LLONG_MAX ? 0 : targets[first]};
  }
}

template <typename T, int VEC, int CACHE>
void launch_rows(unsigned rows, int threads, const T* logits, const int32_t* targets, T* d_logits,
                 int64_t vocab, int32_t pad_id, float smoothing, float grad_scale,
                 RowLoss* row_losses, cudaStream_t stream) {
  cross_entropy_rows<T, VEC, CACHE><<<rows, threads, 0, stream>>>(
      logits, targets, d_logits, vocab, pad_id, smoothing, grad_scale, row_losses);
}

}  // namespace

namespace {

// The checks and launches of both forms; the row results go to the stream's scratch and their
// sums to `device_sums` (a DeviceSums, kLossSumsWords words), or to the scratch when null. Returns
// where the sums are, or null when there are no rows (nothing enqueued).
void* enqueue_cross_entropy(const char* op, const Tensor& logits, const Tensor& targets,
                            int32_t pad_id, float smoothing, float grad_scale, Tensor& d_logits,
                            void* device_sums_out) {
  detail::require_rank(op, "logits", logits, 2);
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_shape(op, "targets", targets, {rows});
  detail::require_dtype(op, "targets", targets, DType::i32);
  if (!d_logits.empty()) {
    check_shape(op, "d_logits", d_logits, {rows, vocab});
    detail::require_same_dtype(op, "d_logits", d_logits, "logits", logits);
  }
  detail::require_on_gpu(op, {{"logits", &logits}, {"targets", &targets}});
  detail::require_optional_on_gpu(op, {{"d_logits", &d_logits}});
  if (!(smoothing >= 0.0f && smoothing <= 1.0f))
    throw std::invalid_argument(std::string(op) + ": label smoothing " + std::to_string(smoothing) +
                                " is outside [0, 1]");
  if (vocab > INT_MAX)
    throw std::invalid_argument(std::string(op) + ": vocabulary " + std::to_string(vocab) +
                                " is too large");
  if (rows == 0) return nullptr;
  if (vocab == 0)
    throw std::invalid_argument(std::string(op) + ": logits " + logits.shape_string() +
                                " has no vocabulary");

  cudaStream_t stream = current_stream();
  StreamResources& resources = stream_resources(stream);
  ScratchLayout layout;
  const size_t rows_offset = layout.add(static_cast<size_t>(rows) * sizeof(RowLoss));
  const size_t sums_offset = layout.add(sizeof(DeviceSums));
  void* base = resources.scratch(layout.total());
  RowLoss* row_losses = at_offset<RowLoss>(base, rows_offset);
  DeviceSums* device_sums = device_sums_out != nullptr ? static_cast<DeviceSums*>(device_sums_out)
                                                       : at_offset<DeviceSums>(base, sums_offset);

  const bool aligned =
      is_aligned16(logits.data) && (d_logits.empty() || is_aligned16(d_logits.data));
  const auto* target_ids = static_cast<const int32_t*>(targets.data);
  dispatch_float_dtype(logits.dtype, op, "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(logits.data);
    T* out = d_logits.empty() ? nullptr : static_cast<T*>(d_logits.data);
    constexpr int vec = kPackWidth<T>;
    const unsigned grid = static_cast<unsigned>(rows);
    auto args = [&](auto launcher, int vec_width) {
      const int64_t packs = vocab / vec_width;
      const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (packs + 31) / 32 * 32));
      launcher(threads, (packs + threads - 1) / threads);
    };
    if (aligned && vocab % vec == 0) {
      args(
          [&](int threads, int64_t per_thread) {
            if (per_thread <= 1)
              launch_rows<T, vec, 1>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                     grad_scale, row_losses, stream);
            else if (per_thread <= 2)
              launch_rows<T, vec, 2>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                     grad_scale, row_losses, stream);
            else if (per_thread <= 4)
              launch_rows<T, vec, 4>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                     grad_scale, row_losses, stream);
            else if (per_thread <= 8 && sizeof(T) == 4) {
              // Not for 16-bit dtypes: 8 cached packs of them spill registers.
              if constexpr (sizeof(T) == 4)
                launch_rows<T, vec, 8>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                       grad_scale, row_losses, stream);
            } else
              launch_rows<T, vec, 0>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                     grad_scale, row_losses, stream);
          },
          vec);
    } else {
      args(
          [&](int threads, int64_t) {
            launch_rows<T, 1, 0>(grid, threads, in, target_ids, out, vocab, pad_id, smoothing,
                                 grad_scale, row_losses, stream);
          },
          1);
    }
    CUDA_CHECK_LAUNCH();
  });
  sum_row_losses<<<1, kSumThreads, 0, stream>>>(row_losses, target_ids, rows, device_sums);
  CUDA_CHECK_LAUNCH();
  return device_sums;
}

// Copies the sums at `device_sums` back (synchronising the current stream) and checks the targets.
LossSums read_sums(const char* op, const void* device_sums, int64_t vocab) {
  cudaStream_t stream = current_stream();
  auto* host_sums =
      static_cast<DeviceSums*>(stream_resources(stream).host_result(sizeof(DeviceSums)));
  CUDA_CHECK(
      cudaMemcpyAsync(host_sums, device_sums, sizeof(DeviceSums), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const DeviceSums sums = *host_sums;
  if (sums.bad_rows > 0)
    throw std::invalid_argument(std::string(op) + ": target " +
                                std::to_string(sums.first_bad_target) + " at row " +
                                std::to_string(sums.first_bad_row) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  LossSums result;
  result.loss = sums.loss;
  result.nll = sums.nll;
  result.tokens = sums.tokens;
  result.correct = sums.correct;
  return result;
}

}  // namespace

static_assert(sizeof(DeviceSums) <= kLossSumsWords * sizeof(int32_t));

LossSums cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, int32_t pad_id,
                                        float smoothing, float grad_scale, Tensor& d_logits) {
  constexpr const char* op = "cross_entropy_forward_backward";
  const void* sums =
      enqueue_cross_entropy(op, logits, targets, pad_id, smoothing, grad_scale, d_logits, nullptr);
  return sums == nullptr ? LossSums{} : read_sums(op, sums, logits.dim(1));
}

void cross_entropy_forward_backward_into(const Tensor& logits, const Tensor& targets,
                                         int32_t pad_id, float smoothing, float grad_scale,
                                         Tensor& d_logits, Tensor& sums) {
  constexpr const char* op = "cross_entropy_forward_backward_into";
  detail::require_on_gpu(op, {{"sums", &sums}});
  if (enqueue_cross_entropy(op, logits, targets, pad_id, smoothing, grad_scale, d_logits,
                            sums.data) == nullptr)
    CUDA_CHECK(cudaMemsetAsync(sums.data, 0, sizeof(DeviceSums), current_stream()));
}

LossSums read_loss_sums(const Tensor& sums, int64_t vocab) {
  return read_sums("read_loss_sums", sums.data, vocab);
}

}  // namespace nmt::cuda
