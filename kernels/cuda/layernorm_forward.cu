// LayerNorm forward on the GPU, and the post-norm sublayer's residual tail fused into it. Rows of
// up to 1024 columns (a multiple of 8 for 16-bit dtypes, of 4 for f32, 16-byte aligned; or up to
// 256 of any width) take the register path (layernorm_rows.cuh): one warp per row, the row held in
// registers as 16-byte packs, statistics in fp32 from a two-pass (mean, then centred squares) sum.
// Other rows take a block-per-row path through global memory.
//
// dropout_residual_layernorm_forward computes the LayerNorm input sum = residual + dropout(branch)
// where layernorm_forward loads x, stores it (the backward reads it), and normalises the values it
// holds, so it reads two [rows, d] tensors and writes two where dropout_residual_add then
// layernorm_forward read four and wrote two. It equals that pair bit for bit: the mask is drawn for
// the same flat element index (dropout_mask.cuh), the sum is rounded to T as
// dropout_residual_add stores it (the unfused LayerNorm reads the stored sum), and the statistics
// and outputs come from the same code (normalise_row, normalise_row_generic) in the variant
// layernorm_forward would pick for (sum, gamma, beta, y). Given keep_bits, the register path in
// 8-element packs (bf16 / f16) also stores each pack's mask byte (kernels/philox.h), so that the
// backward tails read one byte per pack where they drew two Philox blocks (layernorm_backward.cu).
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

using layernorm_rows::kGenericThreads;
using layernorm_rows::kRowThreads;
using layernorm_rows::kWarpsPerBlock;

// --- the normalisation both forward ops share ---------------------------------------------------

// Element i of a pack of a variant holding VEC * CHUNKS elements of T a lane, in f32. From 33 to 64
// bytes a lane the integer unpacking of pack_element (device_util.cuh): with cvt.f32.bf16 ptxas
// gave the bf16 d = 1024 fused forward 116 registers, two 256-thread blocks an SM (the f16 one 76),
// with the shifts 78, three blocks (forward_min_blocks). Up to 32 bytes the conversion instruction:
// there pack_element ran the bf16 d = 512 fused forward 0.2 us slower (ncu, H100, session 21).
template <typename T, int VEC, int CHUNKS>
__device__ __forceinline__ float row_element(const Pack<T, VEC>& pack, int i) {
  if constexpr (VEC * CHUNKS * sizeof(T) > 32)
    return pack_element(pack, i);
  else
    return to_float(pack.v[i]);
}

// Register path: the lane's packs xs of row `row` (pack c at column (c * 32 + lane) * VEC) hold
// the LayerNorm input, gs and bs the same columns of gamma and beta; writes y's row and, from lane
// 0, mean[row] and rstd[row].
template <typename T, int VEC, int CHUNKS>
__device__ __forceinline__ void normalise_row(const Pack<T, VEC> (&xs)[CHUNKS],
                                              const Pack<T, VEC> (&gs)[CHUNKS],
                                              const Pack<T, VEC> (&bs)[CHUNKS],
                                              T* __restrict__ y_row, float* __restrict__ mean,
                                              float* __restrict__ rstd, int64_t row, int lane,
                                              int d, float eps) {
  using P = Pack<T, VEC>;
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
    if ((c * 32 + lane) * VEC < d)
#pragma unroll
      for (int i = 0; i < VEC; ++i) sum += row_element<T, VEC, CHUNKS>(xs[c], i);
  const float mu = warp_sum(sum) / d;
  float squares = 0.0f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
    if ((c * 32 + lane) * VEC < d)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float centred = row_element<T, VEC, CHUNKS>(xs[c], i) - mu;
        squares += centred * centred;
      }
  const float r = rsqrtf(warp_sum(squares) / d + eps);
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (c * 32 + lane) * VEC;
    if (col < d) {
      P out;
#pragma unroll
      for (int i = 0; i < VEC; ++i)
        out.v[i] = from_float<T>((row_element<T, VEC, CHUNKS>(xs[c], i) - mu) * r *
                                     row_element<T, VEC, CHUNKS>(gs[c], i) +
                                 row_element<T, VEC, CHUNKS>(bs[c], i));
      *reinterpret_cast<P*>(y_row + col) = out;
    }
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// Generic path, block blockIdx.x on row x_row (the LayerNorm input as stored, read back by the
// threads that wrote or read it first), after each thread summed its elements i = threadIdx.x,
// threadIdx.x + blockDim.x, ... into `partial_sum` in that order: the mean, the centred squares,
// y's row and mean / rstd of the row. `shared` holds 32 floats.
template <typename T>
__device__ __forceinline__ void normalise_row_generic(const T* x_row, float partial_sum,
                                                      const T* __restrict__ gamma,
                                                      const T* __restrict__ beta, T* y_row,
                                                      float* mean, float* rstd, int64_t d,
                                                      float eps, float* shared) {
  const float mu = block_sum(partial_sum, shared) / d;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float centred = to_float(x_row[i]) - mu;
    squares += centred * centred;
  }
  const float r = rsqrtf(block_sum(squares, shared) / d + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    y_row[i] =
        from_float<T>((to_float(x_row[i]) - mu) * r * to_float(gamma[i]) + to_float(beta[i]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

// --- layernorm_forward ---------------------------------------------------------------------------

template <typename T, int VEC, int CHUNKS>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_rows(const T* __restrict__ x, const T* __restrict__ gamma,
                           const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                           float* __restrict__ rstd, int64_t rows, int d, float eps) {
  using P = Pack<T, VEC>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const T* x_row = x + row * d;
  P xs[CHUNKS], gs[CHUNKS], bs[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (c * 32 + lane) * VEC;
    if (col < d) {
      xs[c] = *reinterpret_cast<const P*>(x_row + col);
      gs[c] = *reinterpret_cast<const P*>(gamma + col);
      bs[c] = *reinterpret_cast<const P*>(beta + col);
    }
  }
  normalise_row<T, VEC, CHUNKS>(xs, gs, bs, y + row * d, mean, rstd, row, lane, d, eps);
}

template <typename T>
__global__ void layernorm_forward_generic(const T* __restrict__ x, const T* __restrict__ gamma,
                                          const T* __restrict__ beta, T* __restrict__ y,
                                          float* __restrict__ mean, float* __restrict__ rstd,
                                          int64_t d, float eps) {
  __shared__ float shared[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * d;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += to_float(x[offset + i]);
  normalise_row_generic<T>(x + offset, sum, gamma, beta, y + offset, mean, rstd, d, eps, shared);
}

// --- dropout_residual_layernorm_forward ----------------------------------------------------------

// The LayerNorm input of VEC consecutive elements from flat index `at`: residual + dropout(branch)
// with dropout_residual_add_kernel's arithmetic (elementwise.cu): the dropped-out branch rounded to
// T, then the add in f32 rounded to T, __fmul_rn / __fadd_rn so that nvcc cannot contract them
// into one FMA. Without DROPOUT (p == 0) the add alone, as dropout_residual_add's map adds. VEC >
// 1: the pointers are 16-byte aligned and at % VEC == 0 (whole Philox blocks). keep_bytes (VEC 8
// only; null: not stored): the mask's byte of the pack, at / 8, is stored there.
template <typename T, int VEC, bool DROPOUT>
__device__ __forceinline__ Pack<T, VEC> residual_sum(const T* residual, const T* branch, int64_t at,
                                                     float p, float keep_scale, const RngKey& key,
                                                     uint8_t* keep_bytes = nullptr) {
  using P = Pack<T, VEC>;
  const P a = *reinterpret_cast<const P*>(residual + at);
  const P b = *reinterpret_cast<const P*>(branch + at);
  P sum;
  if constexpr (DROPOUT) {
    const uint32_t keep = dropout_keep_bits<VEC>(key, at, p);
    if constexpr (VEC == 8)
      if (keep_bytes != nullptr) keep_bytes[at / 8] = static_cast<uint8_t>(keep);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const T dropped =
          from_float<T>(__fmul_rn(to_float(b.v[i]), dropout_bit_scale(keep, i, keep_scale)));
      sum.v[i] = from_float<T>(__fadd_rn(to_float(a.v[i]), to_float(dropped)));
    }
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      sum.v[i] = from_float<T>(__fadd_rn(to_float(a.v[i]), to_float(b.v[i])));
  }
  return sum;
}

// Blocks per multiprocessor the fused forward is compiled for (__launch_bounds__), by the bytes of
// a row a lane holds: 4 (at most 64 registers a thread) up to 32 bytes (d <= 512 in bf16 / f16,
// <= 256 in f32); above, the compiler's choice, which is 72 to 78 registers, three blocks, up to
// 64 bytes (d <= 1024 in bf16 / f16, <= 512 in f32; bf16 with row_element's shifts, see there). The
// kernel is bound by the latency of its loads (one row a warp: loaded, summed, stored), so it wants
// the warps: three blocks instead of two took the big post-norm step's forward (8192 x 1024 bf16)
// from 26.34 to 23.57 us a launch (ncu, H100, session 21); four spilled 8 to 32 bytes. At 67
// registers a bf16 d = 512 block of 8 rows held 3 blocks an SM, and 4 took bench-kernels' 8192 x
// 512 bf16 forward from 0.0175 to 0.0169 ms (H100, session 12); 5 (48 registers) ran it slower
// (12.39 -> 12.57 us a launch in a base step, session 21).
template <typename T, int VEC, int CHUNKS>
constexpr int forward_min_blocks() {
  return VEC * CHUNKS * static_cast<int>(sizeof(T)) <= 32 ? 4 : 1;
}

// residual, branch, sum: [rows, d] (sum may be the very same memory as residual or branch: each
// pack is read, then written, by one lane); keep_bytes: [rows * d / 8] or null (residual_sum; a
// warp stores 32 consecutive bytes a chunk); the rest as layernorm_forward_rows.
template <typename T, int VEC, int CHUNKS, bool DROPOUT>
__global__ void __launch_bounds__(kRowThreads, forward_min_blocks<T, VEC, CHUNKS>())
    dropout_residual_layernorm_rows(const T* residual, const T* branch, T* sum,
                                    const T* __restrict__ gamma, const T* __restrict__ beta,
                                    T* __restrict__ y, float* __restrict__ mean,
                                    float* __restrict__ rstd, int64_t rows, int d, float eps,
                                    float p, float keep_scale, RngKey key,
                                    uint8_t* __restrict__ keep_bytes) {
  using P = Pack<T, VEC>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  P xs[CHUNKS], gs[CHUNKS], bs[CHUNKS];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (c * 32 + lane) * VEC;
    if (col < d) {
      const int64_t at = row * d + col;
      xs[c] = residual_sum<T, VEC, DROPOUT>(residual, branch, at, p, keep_scale, key, keep_bytes);
      *reinterpret_cast<P*>(sum + at) = xs[c];
      gs[c] = *reinterpret_cast<const P*>(gamma + col);
      bs[c] = *reinterpret_cast<const P*>(beta + col);
    }
  }
  normalise_row<T, VEC, CHUNKS>(xs, gs, bs, y + row * d, mean, rstd, row, lane, d, eps);
}

// One block per row: each thread computes and stores its elements of the sum, adding them in the
// order layernorm_forward_generic adds x, then reads them back for the rest.
template <typename T, bool DROPOUT>
__global__ void dropout_residual_layernorm_generic(const T* residual, const T* branch, T* sum,
                                                   const T* __restrict__ gamma,
                                                   const T* __restrict__ beta, T* __restrict__ y,
                                                   float* __restrict__ mean,
                                                   float* __restrict__ rstd, int64_t d, float eps,
                                                   float p, float keep_scale, RngKey key) {
  __shared__ float shared[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * d;
  float partial_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const T value =
        residual_sum<T, 1, DROPOUT>(residual, branch, offset + i, p, keep_scale, key).v[0];
    sum[offset + i] = value;
    partial_sum += to_float(value);
  }
  normalise_row_generic<T>(sum + offset, partial_sum, gamma, beta, y + offset, mean, rstd, d, eps,
                           shared);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                       Tensor& mean, Tensor& rstd, float eps) {
  constexpr const char* op = "layernorm_forward";
  layernorm_rows::check_common(op, x, gamma);
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "beta", beta, {d});
  check_shape(op, "y", y, {rows, d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  detail::require_same_dtype(op, "beta", beta, "x", x);
  detail::require_same_dtype(op, "y", y, "x", x);
  detail::require_dtype(op, "mean", mean, DType::f32);
  detail::require_dtype(op, "rstd", rstd, DType::f32);
  detail::require_on_gpu(
      op,
      {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}});
  if (rows == 0 || d == 0) return;
  cudaStream_t stream = current_stream();
  const bool aligned = is_aligned16(x.data) && is_aligned16(gamma.data) &&
                       is_aligned16(beta.data) && is_aligned16(y.data);
  dispatch_float_dtype(x.dtype, op, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data);
    const T* gp = static_cast<const T*>(gamma.data);
    const T* bp = static_cast<const T*>(beta.data);
    T* yp = static_cast<T*>(y.data);
    float* mp = static_cast<float*>(mean.data);
    float* rp = static_cast<float*>(rstd.data);
    const bool done = layernorm_rows::with_row_variant<T>(d, aligned, [&](auto vec, auto chunks) {
      layernorm_forward_rows<T, decltype(vec)::value, decltype(chunks)::value>
          <<<blocks_for(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
              xp, gp, bp, yp, mp, rp, rows, static_cast<int>(d), eps);
    });
    if (!done)
      layernorm_forward_generic<T><<<static_cast<unsigned>(rows), kGenericThreads, 0, stream>>>(
          xp, gp, bp, yp, mp, rp, d, eps);
    CUDA_CHECK_LAUNCH();
  });
}

bool dropout_residual_layernorm_forward(const Tensor& residual, const Tensor& branch, Tensor& sum,
                                        float p, const RngKey& key, const Tensor& gamma,
                                        const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                                        float eps, const Tensor& keep_bits) {
  constexpr const char* op = "dropout_residual_layernorm_forward";
  detail::require_rank(op, "residual", residual, 2, "[rows, d]");
  const int64_t rows = residual.dim(0), d = residual.dim(1);
  check_shape(op, "branch", branch, {rows, d});
  check_shape(op, "sum", sum, {rows, d});
  check_shape(op, "y", y, {rows, d});
  check_shape(op, "gamma", gamma, {d});
  check_shape(op, "beta", beta, {d});
  detail::require_same_dtype(op, "branch", branch, "residual", residual);
  detail::require_same_dtype(op, "sum", sum, "residual", residual);
  detail::require_same_dtype(op, "y", y, "residual", residual);
  detail::require_same_dtype(op, "gamma", gamma, "residual", residual);
  detail::require_same_dtype(op, "beta", beta, "residual", residual);
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  detail::require_dtype(op, "mean", mean, DType::f32);
  detail::require_dtype(op, "rstd", rstd, DType::f32);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"residual", &residual},
                              {"branch", &branch},
                              {"sum", &sum},
                              {"gamma", &gamma},
                              {"beta", &beta},
                              {"y", &y},
                              {"mean", &mean},
                              {"rstd", &rstd}});
  detail::require_keep_bits(
      op, keep_bits, rows, d,
      {{"residual", &residual}, {"branch", &branch}, {"sum", &sum}, {"y", &y}});
  detail::require_optional_on_gpu(op, {{"keep_bits", &keep_bits}});
  detail::require_disjoint_or_same(op, "sum", sum, "residual", residual);
  detail::require_disjoint_or_same(op, "sum", sum, "branch", branch);
  detail::require_disjoint(op, "y", y, "residual", residual);
  detail::require_disjoint(op, "y", y, "branch", branch);
  detail::require_disjoint(op, "y", y, "sum", sum);
  if (rows == 0 || d == 0) return false;
  cudaStream_t stream = current_stream();
  // The variant layernorm_forward takes for its x = sum; the packs of the register path also read
  // residual and branch, so they must be aligned where it is.
  const bool aligned = is_aligned16(sum.data) && is_aligned16(gamma.data) &&
                       is_aligned16(beta.data) && is_aligned16(y.data);
  const bool inputs_aligned = is_aligned16(residual.data) && is_aligned16(branch.data);
  const float keep_scale = 1.0f / (1.0f - p);  // dropout_residual_add's expression
  // Where the mask goes, if the kernel that runs stores it (p > 0, 8-element packs).
  auto* const keep_bytes = p > 0.0f ? static_cast<uint8_t*>(keep_bits.data) : nullptr;
  bool unfused = false, stored = false;
  dispatch_float_dtype(residual.dtype, op, "residual", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* rp = static_cast<const T*>(residual.data);
    const T* bp = static_cast<const T*>(branch.data);
    T* sp = static_cast<T*>(sum.data);
    const T* gammap = static_cast<const T*>(gamma.data);
    const T* betap = static_cast<const T*>(beta.data);
    T* yp = static_cast<T*>(y.data);
    float* meanp = static_cast<float*>(mean.data);
    float* rstdp = static_cast<float*>(rstd.data);
    const auto with_dropout = [&](auto launch) {
      if (p > 0.0f)
        launch(std::true_type{});
      else
        launch(std::false_type{});
    };
    const bool done = layernorm_rows::with_row_variant<T>(d, aligned, [&](auto vec, auto chunks) {
      constexpr int kVec = decltype(vec)::value;
      if (kVec > 1 && !inputs_aligned) {
        unfused = true;
        return;
      }
      stored = kVec == 8 && keep_bytes != nullptr;
      with_dropout([&](auto dropout) {
        dropout_residual_layernorm_rows<T, kVec, decltype(chunks)::value, decltype(dropout)::value>
            <<<blocks_for(rows, kWarpsPerBlock), kRowThreads, 0, stream>>>(
                rp, bp, sp, gammap, betap, yp, meanp, rstdp, rows, static_cast<int>(d), eps, p,
                keep_scale, key, stored ? keep_bytes : nullptr);
      });
    });
    if (!done)
      with_dropout([&](auto dropout) {
        dropout_residual_layernorm_generic<T, decltype(dropout)::value>
            <<<static_cast<unsigned>(rows), kGenericThreads, 0, stream>>>(
                rp, bp, sp, gammap, betap, yp, meanp, rstdp, d, eps, p, keep_scale, key);
      });
    CUDA_CHECK_LAUNCH();
  });
  // Packs layernorm_forward would read from an aligned sum, over a residual or branch that is not
  // aligned (no caller has one): the two ops, which give these bits by definition.
  if (unfused) {
    dropout_residual_add(residual, branch, sum, p, key);
    layernorm_forward(sum, gamma, beta, y, mean, rstd, eps);
  }
  return stored;
}

}  // namespace nmt::cuda
