// Fused softmax cross-entropy with label smoothing on the GPU: one block per row, two passes over
// the row. Pass 1 keeps an online (max, sum of exp) pair, the sum of the logits and the first
// argmax, and block reductions combine them; pass 2 writes grad_scale * (softmax - q) in the
// logits' dtype, never materialising fp32 probabilities. Per-row results are summed in a fixed
// order by one block, in double.
//
// Two row kernels. cross_entropy_rows_smem takes the rows that fit in shared memory (16-byte
// aligned packs, at least one pack a thread, at most kSmemMaxRowBytes: bf16 / f16 up to 36864
// entries, f32 up to 18432): 512 threads copy the row into dynamic shared memory with cp.async and
// read it there in both passes, so three blocks (three rows, 3 x 64 KiB for 32k bf16) are resident
// on an SM and one row's reductions and gradient stores overlap the others' loads. Why: the
// register kernel below holds a 32k bf16 row in a 1024-thread block's registers (4 packs a thread),
// one block an SM, and each SM then loads, reduces behind barriers and stores one row at a time
// (66% of DRAM bandwidth, 475 us for 8192 x 32768 on an H100); holding 8 packs in 512 threads'
// registers to fit two blocks spilled and was slower (docs/perf.md). Shared memory holds the row at
// no register cost: ptxas fits the smem kernel in 40 registers (the bound of three 512-thread
// blocks) with no spills. Each thread copies and reads back only its own packs, so its own
// cp.async.wait_group makes them visible to it without a barrier and pass 1 starts on the first
// pack while the later ones land. Pass 1 works in base 2 (exp2 of x * log2(e) minus the scaled max:
// one FFMA and one ex2 an element) and finds the argmax by comparing a pack's max first, so the
// index search runs only when a pack raises the thread's max. Its per-thread results are combined
// in one barrier: warp butterflies, each warp's result to shared memory, then every warp combines
// the warps' results in the same order (the same bits in every thread). The register kernel
// (cross_entropy_rows) takes every other row: rows of up to 4 packs a thread (8 for f32) keep them
// in registers between the passes, longer rows are read again (from L2); unaligned or odd rows read
// one element at a time. NMT_CROSS_ENTROPY_SMEM=0 (or set_cross_entropy_smem(false)) sends every
// row to the register kernel, to time the two in one binary.
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/env_switch.h"
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

// A row whose target is padding or outside the vocabulary: its gradient row zeroed (out [vocab] T,
// where one is written) and its status stored; returns whether the row is one, so the kernel ends.
template <typename T, int VEC>
__device__ __forceinline__ bool skipped_row(int32_t target, int32_t pad_id, int64_t vocab,
                                            int64_t row, T* out, int64_t packs,
                                            RowLoss* __restrict__ row_losses) {
  if (target != pad_id && target >= 0 && target < vocab) return false;
  if (out) zero_row<T, VEC>(out, packs);
  if (threadIdx.x == 0)
    row_losses[row] = RowLoss{0.0f, 0.0f, target == pad_id ? kPadRow : kBadTarget};
  return true;
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
  if (skipped_row<T, VEC>(target, pad_id, vocab, row, out, packs, row_losses)) return;
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

// The shared-memory kernel's shape: kSmemThreads a block, kSmemBlocksPerSm blocks an SM (the
// register bound that gives: 65536 / 1536 = 40 a thread), rows of at most kSmemMaxRowBytes (three
// of them and the blocks' reserved 1 KiB fit the 227 KiB an H100 SM gives shared memory).
constexpr int kSmemThreads = 512;
constexpr int kSmemWarps = kSmemThreads / 32;
constexpr int kSmemBlocksPerSm = 3;
constexpr int kSmemMaxRowBytes = 72 * 1024;
constexpr int kSmemMaxPacksPerThread = kSmemMaxRowBytes / 16 / kSmemThreads;
static_assert(kSmemMaxRowBytes % (16 * kSmemThreads) == 0);

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One warp's pass-1 results: its max and first argmax, its sum of exp relative to 2^(max * log2 e)
// and its sum of logits.
struct WarpResult {
  float max;
  int best_index;
  float sum;
  float total;
};

// cp.async.wait_group for a count known once the loop around it is unrolled (the instruction
// takes an immediate): waits until at most `pending` of this thread's groups are in flight (at
// most MAX where pending is larger: never fewer landed than asked).
template <int MAX>
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  if constexpr (MAX == 0) {
    cp_async_wait<0>();
  } else {
    if (pending >= MAX)
      cp_async_wait<MAX>();
    else
      cp_async_wait_pending<MAX - 1>(pending);
  }
}

// A 16-byte pack's elements in f32 (pack_element: bf16 words shifted or masked, no conversions).
template <typename T>
__device__ __forceinline__ void unpack(const Pack<T, kPackWidth<T>>& pack,
                                       float (&values)[kPackWidth<T>]) {
#pragma unroll
  for (int i = 0; i < kPackWidth<T>; ++i) values[i] = pack_element(pack, i);
}

// f32 values rounded to T (to nearest) in one pack: two elements a conversion for 16-bit T.
template <typename T>
__device__ __forceinline__ Pack<T, kPackWidth<T>> packed(const float (&values)[kPackWidth<T>]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 words{pack2<T>(values[0], values[1]), pack2<T>(values[2], values[3]),
                      pack2<T>(values[4], values[5]), pack2<T>(values[6], values[7])};
    return reinterpret_cast<const Pack<T, kPackWidth<T>>&>(words);
  } else {
    Pack<T, kPackWidth<T>> pack;
#pragma unroll
    for (int i = 0; i < kPackWidth<T>; ++i) pack.v[i] = values[i];
    return pack;
  }
}

// The rows that fit in shared memory: vocab * sizeof(T) <= kSmemMaxRowBytes, vocab a multiple of
// the pack width, at least kSmemThreads packs (every thread has one), 16-byte aligned rows; the
// launch gives vocab * sizeof(T) bytes of dynamic shared memory. The row is copied once, so
// d_logits may alias logits: each thread writes only packs it copied itself and read first.
template <typename T>
__global__ void __launch_bounds__(kSmemThreads, kSmemBlocksPerSm)
    cross_entropy_rows_smem(const T* logits, const int32_t* __restrict__ targets, T* d_logits,
                            int64_t vocab, int32_t pad_id, float smoothing, float grad_scale,
                            RowLoss* __restrict__ row_losses) {
  constexpr int VEC = kPackWidth<T>;
  using P = Pack<T, VEC>;
  extern __shared__ __align__(16) unsigned char row_bytes[];  // [vocab] T: this block's row
  __shared__ WarpResult warp_results[kSmemWarps];
  P* const row_packs = reinterpret_cast<P*>(row_bytes);
  const int64_t row = blockIdx.x;
  const int packs = static_cast<int>(vocab / VEC);
  const P* in = reinterpret_cast<const P*>(logits + row * vocab);
  T* out = d_logits ? d_logits + row * vocab : nullptr;
  const int32_t target = targets[row];
  if (skipped_row<T, VEC>(target, pad_id, vocab, row, out, packs, row_losses)) return;

    // Thread t copies packs t, t + kSmemThreads, ..., one commit group each (empty past the row).
#pragma unroll
  for (int k = 0; k < kSmemMaxPacksPerThread; ++k) {
    const int p = threadIdx.x + k * kSmemThreads;
    if (p < packs) cp_async16(&row_packs[p], &in[p], true);
    cp_async_commit();
  }

  // Pass 1: sum holds the exps relative to 2^scaled_max, scaled_max = max * log2(e) rounded once
  // (__fmul_rn: never contracted, so every thread that finds the same max scales it to the same
  // bits). running_max is also the best value: a pack raising it holds the thread's new argmax.
  float running_max = -INFINITY, scaled_max = -INFINITY, sum = 0.0f, total = 0.0f;
  int best_index = INT_MAX;
#pragma unroll
  for (int k = 0; k < kSmemMaxPacksPerThread; ++k) {
    const int p = threadIdx.x + k * kSmemThreads;
    if (p >= packs) break;
    cp_async_wait_pending<kSmemMaxPacksPerThread - 1>(kSmemMaxPacksPerThread - 1 - k);
    float values[VEC];
    unpack(row_packs[p], values);
    float pack_max = values[0];
#pragma unroll
    for (int i = 1; i < VEC; ++i) pack_max = fmaxf(pack_max, values[i]);
    if (pack_max > running_max) {
      // Packs come in increasing index order per thread, so a strict > keeps the first maximum.
      int first = VEC - 1;
#pragma unroll
      for (int i = VEC - 2; i >= 0; --i)
        if (values[i] == pack_max) first = i;
      best_index = p * VEC + first;
      const float new_scaled_max = __fmul_rn(pack_max, kLog2e);
      sum *= fast_exp2(scaled_max - new_scaled_max);
      running_max = pack_max;
      scaled_max = new_scaled_max;
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      sum += fast_exp2(fmaf(values[i], kLog2e, -scaled_max));
      total += values[i];
    }
  }
  // Every copy of this thread has landed: after the barrier below any thread may read any pack.
  cp_async_wait<0>();

  // The warp's argmax and max, then its sums relative to that max, by butterflies (the same bits
  // in every lane); lane 0 stores them.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float warp_max = running_max;
  int warp_best = best_index;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    keep_better(warp_max, warp_best, __shfl_xor_sync(0xffffffffu, warp_max, offset),
                __shfl_xor_sync(0xffffffffu, warp_best, offset));
  const float warp_sum_exp = warp_sum(
      running_max == -INFINITY ? 0.0f : sum * fast_exp2(scaled_max - __fmul_rn(warp_max, kLog2e)));
  const float warp_total = warp_sum(total);
  if (lane == 0) warp_results[warp] = WarpResult{warp_max, warp_best, warp_sum_exp, warp_total};
  __syncthreads();

  // Every warp combines the kSmemWarps results the same way, so every thread holds the same row
  // statistics and no second barrier is needed.
  const WarpResult mine =
      lane < kSmemWarps ? warp_results[lane] : WarpResult{-INFINITY, INT_MAX, 0.0f, 0.0f};
  float row_max = mine.max;
  int row_best = mine.best_index;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    keep_better(row_max, row_best, __shfl_xor_sync(0xffffffffu, row_max, offset),
                __shfl_xor_sync(0xffffffffu, row_best, offset));
  const float row_scaled_max = __fmul_rn(row_max, kLog2e);
  const float sum_exp = warp_sum(
      mine.max == -INFINITY ? 0.0f
                            : mine.sum * fast_exp2(__fmul_rn(mine.max, kLog2e) - row_scaled_max));
  const float sum_logits = warp_sum(mine.total);
  // log2 of the sum of exp: pass 2's probabilities are 2^(x * log2(e) - log2_sum_exp).
  const float log2_sum_exp = row_scaled_max + log2f(sum_exp);
  if (threadIdx.x == 0) {
    const float log_sum_exp = log2_sum_exp * kLn2;
    const float target_logit = to_float(reinterpret_cast<const T*>(row_bytes)[target]);
    const float nll = log_sum_exp - target_logit;
    const float loss = log_sum_exp - (1.0f - smoothing) * target_logit -
                       smoothing / static_cast<float>(vocab) * sum_logits;
    row_losses[row] = RowLoss{loss, nll, row_best == target ? kCorrectRow : kWrongRow};
  }
  if (!out) return;

  // Pass 2: grad_scale * p - grad_scale * q, q the off-target share except at the target.
  const float off_target = smoothing / static_cast<float>(vocab);
  const float scaled_off = grad_scale * off_target;
  const float scaled_on = grad_scale * (1.0f - smoothing + off_target);
  const int target_pack = target / VEC;
  P* const out_packs = reinterpret_cast<P*>(out);
#pragma unroll
  for (int k = 0; k < kSmemMaxPacksPerThread; ++k) {
    const int p = threadIdx.x + k * kSmemThreads;
    if (p >= packs) break;
    float values[VEC];
    unpack(row_packs[p], values);
    float gradient[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      gradient[i] =
          fmaf(grad_scale, fast_exp2(fmaf(values[i], kLog2e, -log2_sum_exp)), -scaled_off);
    if (p == target_pack) {
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        if (p * VEC + i == target)
          gradient[i] =
              fmaf(grad_scale, fast_exp2(fmaf(values[i], kLog2e, -log2_sum_exp)), -scaled_on);
    }
    out_packs[p] = packed<T>(gradient);
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

EnvSwitch smem_switch("NMT_CROSS_ENTROPY_SMEM", /*default_on=*/true);

// The shared-memory kernel for T with kSmemMaxRowBytes of dynamic shared memory allowed and the
// largest shared-memory carveout preferred, or null where this GPU can't hold kSmemBlocksPerSm
// blocks of the largest row (the design's premise); decided once per process.
template <typename T>
auto smem_rows_kernel() {
  using Kernel = decltype(&cross_entropy_rows_smem<T>);
  static const Kernel kernel = []() -> Kernel {
    int device = 0, per_block = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (per_block < kSmemMaxRowBytes + static_cast<int>(sizeof(WarpResult)) * kSmemWarps)
      return nullptr;
    const Kernel k = cross_entropy_rows_smem<T>;
    CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemMaxRowBytes));
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    int blocks = 0;
    CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kSmemThreads, kSmemMaxRowBytes));
    return blocks >= kSmemBlocksPerSm ? k : nullptr;
  }();
  return kernel;
}

// Whether rows of `vocab` T take the shared-memory kernel: the switch on, 16-byte packs (aligned:
// both tensors' data), at least one pack a thread (shorter rows leave most of 512 threads idle,
// where the register kernel sizes its block to the row), at most kSmemMaxRowBytes, and a GPU that
// holds the kernel's blocks.
template <typename T>
bool takes_smem_rows(int64_t vocab, bool aligned) {
  constexpr int vec = kPackWidth<T>;
  return cross_entropy_smem() && aligned && vocab % vec == 0 && vocab / vec >= kSmemThreads &&
         vocab * static_cast<int64_t>(sizeof(T)) <= kSmemMaxRowBytes &&
         smem_rows_kernel<T>() != nullptr;
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
    if (takes_smem_rows<T>(vocab, aligned)) {
      smem_rows_kernel<T>()<<<grid, kSmemThreads, vocab * sizeof(T), stream>>>(
          in, target_ids, out, vocab, pad_id, smoothing, grad_scale, row_losses);
    } else if (aligned && vocab % vec == 0) {
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

void set_cross_entropy_smem(bool on) {
  smem_switch.set(on);
}

bool cross_entropy_smem() {
  return smem_switch.get();
}

bool cross_entropy_smem_rows(DType dtype, int64_t vocab) {
  bool smem = false;
  dispatch_float_dtype(dtype, "cross_entropy_smem_rows", "dtype", [&](auto tag) {
    smem = takes_smem_rows<typename decltype(tag)::type>(vocab, /*aligned=*/true);
  });
  return smem;
}

}  // namespace nmt::cuda
