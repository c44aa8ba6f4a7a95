// LayerNorm forward on the GPU. Rows of up to 1024 columns (a multiple of 8 for 16-bit dtypes, of 4
// for f32, 16-byte aligned; or up to 256 of any width) take the register path (layernorm_rows.cuh):
// one warp per row, the row held in registers as 16-byte packs, statistics in fp32 from a two-pass
// (mean, then centred squares) sum. Other rows take a block-per-row path through global memory.
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

using layernorm_rows::kGenericThreads;
using layernorm_rows::kRowThreads;
using layernorm_rows::kWarpsPerBlock;

// --- the normalisation ---------------------------------------------------

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
      for (int i = 0; i < VEC; ++i) sum += to_float(xs[c].v[i]);
  const float mu = warp_sum(sum) / d;
  float squares = 0.0f;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
    if ((c * 32 + lane) * VEC < d)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float centred = to_float(xs[c].v[i]) - mu;
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
        out.v[i] = from_float<T>((to_float(xs[c].v[i]) - mu) * r * to_float(gs[c].v[i]) +
                                 to_float(bs[c].v[i]));
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

}  // namespace nmt::cuda
