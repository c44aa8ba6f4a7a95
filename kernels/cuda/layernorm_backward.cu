// LayerNorm backward on the GPU, with its tails: layernorm_backward_add (the pre-norm residual's
// add) and layernorm_backward_dropout_bias (the post-norm sublayer's dropout backward and the
// branch's bias gradient). The register path (layernorm_rows.cuh: one warp per row, rows of up to
// 1024 columns) runs one grid's worth of blocks whose warps stride over the rows; parameter
// gradients are per-block partial sums plus an ordered second pass (reduce.h): deterministic, no
// float atomics. Other rows take a block-per-row path through global memory. The tails are the same
// kernels with the extra work done where dx is stored (BackwardTail), so dx, d_gamma and d_beta are
// the plain backward's bits.
#include <algorithm>

#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/layernorm_rows.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"

namespace nmt::cuda {
namespace {

using layernorm_rows::kGenericThreads;
using layernorm_rows::kRowThreads;
using layernorm_rows::kWarpsPerBlock;

// What the backward does besides dx, d_gamma and d_beta where it stores dx.
enum class BackwardTail {
  none,          // layernorm_backward
  add_residual,  // layernorm_backward_add: dx = residual + the input gradient
  dropout_bias,  // layernorm_backward_dropout_bias: d_branch = dropout_backward(dx), and its
                 // column sums into d_branch_bias
};

// The dropout tail's arguments (unused by the other tails): d_branch [rows, d] T, the mask of key
// with probability p (keep_scale = 1 / (1 - p)).
template <typename T>
struct DropoutTail {
  T* d_branch;
  float p, keep_scale;
  RngKey key;
};

// The dx element stored: the input gradient rounded to T, as layernorm_backward stores it, and with
// ADD_RESIDUAL the residual added to that rounded value in f32 and rounded to T again, as
// residual_add adds (layernorm.h: equal to the two ops bit for bit). __fadd_rn keeps nvcc from
// contracting the product that makes input_gradient and this add into one FMA (one rounding where
// the separate ops round twice in f32).
template <typename T, bool ADD_RESIDUAL>
__device__ __forceinline__ T stored_dx(float input_gradient, T residual) {
  const T rounded = from_float<T>(input_gradient);
  if constexpr (ADD_RESIDUAL)
    return from_float<T>(__fadd_rn(to_float(residual), to_float(rounded)));
  return rounded;
}

// Warps stride over rows; each lane keeps its columns' d_gamma / d_beta sums in registers, the
// block adds its warps' sums in warp order in shared memory and writes one partial row
// [d_gamma | d_beta] (with the dropout tail [d_gamma | d_beta | d_branch_bias]). The next row's
// loads are issued before the current row is computed, so each warp keeps two rows in flight.
// Two blocks per multiprocessor (at most 128 registers) while a lane holds at most 16 16-bit or
// 8 f32 elements (d = 512 in bf16); wider rows get the registers they need at one block per
// multiprocessor rather than spill.
// ADD_RESIDUAL: dx = residual + the input gradient (stored_dx); residual may be dx: a lane reads
// its residual pack of a row before it writes the same pack of dx. DROPOUT_BIAS: after storing a dx
// pack the lane stores d_branch = dx * the pack's dropout scales (dropout_kernel's product of the
// stored dx, rounded to T; a copy of dx when p is 0) and adds the stored d_branch values into its
// warp's row of branch sums in shared memory (registers would make the bf16 d = 512 variant spill
// at two blocks per multiprocessor, as the residual did). The mask of the row is drawn into one
// word per lane before the row's reductions, while the next row's loads are in flight.
template <typename T, int VEC, int CHUNKS, BackwardTail TAIL>
__global__ void __launch_bounds__(kRowThreads, VEC* CHUNKS * sizeof(T) <= 32 ? 2 : 1)
    layernorm_backward_rows(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            const T* residual, T* dx, DropoutTail<T> dropout,
                            float* __restrict__ partials, int64_t rows, int d) {
  constexpr bool ADD_RESIDUAL = TAIL == BackwardTail::add_residual;
  constexpr bool DROPOUT_BIAS = TAIL == BackwardTail::dropout_bias;
  static_assert(VEC * CHUNKS <= 32, "a lane's dropout mask is one 32-bit word");
  // [2, d]: d_gamma then d_beta; with DROPOUT_BIAS then [kWarpsPerBlock, d]: each warp's branch
  // sums.
  extern __shared__ float block_sums[];
  using P = Pack<T, VEC>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* branch_sums = block_sums + (2 + warp) * d;  // this warp's row (DROPOUT_BIAS only)
  P gs[CHUNKS];
  float acc_gamma[CHUNKS][VEC], acc_beta[CHUNKS][VEC];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const int col = (c * 32 + lane) * VEC;
    if (col < d) {
      gs[c] = *reinterpret_cast<const P*>(gamma + col);
      if constexpr (DROPOUT_BIAS)
#pragma unroll
        for (int i = 0; i < VEC; ++i) branch_sums[col + i] = 0.0f;  // the lane's own columns
    }
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc_gamma[c][i] = acc_beta[c][i] = 0.0f;
  }
  auto load_row = [&](int64_t row, P* dys, P* xs) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + lane) * VEC;
      if (col < d) {
        dys[c] = *reinterpret_cast<const P*>(dy + row * d + col);
        xs[c] = *reinterpret_cast<const P*>(x + row * d + col);
      }
    }
  };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  P dys[CHUNKS], xs[CHUNKS];
  if (row < rows) load_row(row, dys, xs);
  for (; row < rows; row += stride) {
    // dx may alias dy: a row is read (one iteration ahead) before it is written, and rows are
    // disjoint between warps.
    P next_dys[CHUNKS], next_xs[CHUNKS];
    if (row + stride < rows) load_row(row + stride, next_dys, next_xs);
    // Bit c * VEC + i: whether the row's element at column (c * 32 + lane) * VEC + i is kept.
    uint32_t keep = 0;
    if constexpr (DROPOUT_BIAS) {
      if (dropout.p > 0.0f)
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const int col = (c * 32 + lane) * VEC;
          if (col < d)
            keep |= dropout_keep_bits<VEC>(dropout.key, row * d + col, dropout.p) << (c * VEC);
        }
    }
    const float mu = mean[row], r = rstd[row];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
      if ((c * 32 + lane) * VEC < d)
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float g_out = to_float(dys[c].v[i]);
          const float xhat = (to_float(xs[c].v[i]) - mu) * r;
          // Rounded product (no FMA contraction), the same value as in the dx formula below, so
          // g - mean(g) is exactly 0 where it should be (d = 1).
          const float g = __fmul_rn(g_out, to_float(gs[c].v[i]));
          sum_g += g;
          sum_g_xhat += g * xhat;
          acc_gamma[c][i] += g_out * xhat;
          acc_beta[c][i] += g_out;
        }
    const float mean_g = warp_sum(sum_g) / d, mean_g_xhat = warp_sum(sum_g_xhat) / d;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + lane) * VEC;
      if (col < d) {
        // The residual is loaded here rather than with the row: held through the reductions it
        // made the widest variants spill (bf16 d = 512 at two blocks per multiprocessor).
        P residuals{};
        if constexpr (ADD_RESIDUAL)
          residuals = *reinterpret_cast<const P*>(residual + row * d + col);
        P out;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float xhat = (to_float(xs[c].v[i]) - mu) * r;
          const float g = __fmul_rn(to_float(dys[c].v[i]), to_float(gs[c].v[i]));
          out.v[i] =
              stored_dx<T, ADD_RESIDUAL>(r * (g - mean_g - xhat * mean_g_xhat), residuals.v[i]);
        }
        *reinterpret_cast<P*>(dx + row * d + col) = out;
        if constexpr (DROPOUT_BIAS) {
          P dropped = out;
          if (dropout.p > 0.0f)
#pragma unroll
            for (int i = 0; i < VEC; ++i)
              dropped.v[i] = from_float<T>(__fmul_rn(
                  to_float(out.v[i]), dropout_bit_scale(keep, c * VEC + i, dropout.keep_scale)));
          *reinterpret_cast<P*>(dropout.d_branch + row * d + col) = dropped;
          // __fadd_rn: in f32 nvcc could otherwise fuse the product that made the value into
          // this add, and the sums would not be of the stored values.
#pragma unroll
          for (int i = 0; i < VEC; ++i)
            branch_sums[col + i] = __fadd_rn(branch_sums[col + i], to_float(dropped.v[i]));
        }
      }
    }
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      dys[c] = next_dys[c];
      xs[c] = next_xs[c];
    }
  }
  for (int w = 0; w < kWarpsPerBlock; ++w) {
    if (warp == w) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const int col = (c * 32 + lane) * VEC;
        if (col < d)
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            block_sums[col + i] = (w == 0 ? 0.0f : block_sums[col + i]) + acc_gamma[c][i];
            block_sums[d + col + i] = (w == 0 ? 0.0f : block_sums[d + col + i]) + acc_beta[c][i];
          }
      }
    }
    __syncthreads();
  }
  // The barriers above also make every warp's branch sums visible to the block.
  constexpr int kSums = DROPOUT_BIAS ? 3 : 2;
  float* block_partials = partials + static_cast<int64_t>(blockIdx.x) * kSums * d;
  for (int col = threadIdx.x; col < 2 * d; col += blockDim.x) block_partials[col] = block_sums[col];
  if constexpr (DROPOUT_BIAS) {
    // The warps' branch sums added in warp order, as d_gamma and d_beta are.
    for (int col = threadIdx.x; col < d; col += blockDim.x) {
      float total = 0.0f;
      for (int w = 0; w < kWarpsPerBlock; ++w) total += block_sums[(2 + w) * d + col];
      block_partials[2 * d + col] = total;
    }
  }
}

// Blocks of the register path's grid for `rows` rows: enough to fill the GPU once with the plain
// kernel, whatever the tail, so that every backward op of this variant adds d_gamma and d_beta in
// the same order on the same GPU (the tails' bit-for-bit equality with the unfused ops rests on
// it). Warps then stride over the rows, so the partial sums stay few (one row of d per block).
template <typename T, int VEC, int CHUNKS>
int64_t backward_row_blocks(int64_t rows) {
  static const int per_sm = resident_blocks_per_sm(
      layernorm_backward_rows<T, VEC, CHUNKS, BackwardTail::none>, kRowThreads,
      2 * static_cast<size_t>(VEC * CHUNKS * 32) * sizeof(float));
  return std::min<int64_t>(blocks_for(rows, kWarpsPerBlock),
                           int64_t{per_sm} * multiprocessor_count());
}

// --- generic path: one block per row through global memory, any width and alignment ------------

// With ADD_RESIDUAL, dx = residual + the input gradient (stored_dx); residual may be dx: each
// element is read and then written by one thread.
template <typename T, bool ADD_RESIDUAL>
__global__ void layernorm_backward_dx_generic(const T* dy, const T* __restrict__ x,
                                              const T* __restrict__ gamma,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd, const T* residual,
                                              T* dx, int64_t d) {
  __shared__ float shared[32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * d;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float g = __fmul_rn(to_float(dy[offset + i]), to_float(gamma[i]));
    sum_g += g;
    sum_g_xhat += g * (to_float(x[offset + i]) - mu) * r;
  }
  const float mean_g = block_sum(sum_g, shared) / d;
  const float mean_g_xhat = block_sum(sum_g_xhat, shared) / d;
  // The block's reads of dy are complete (block_sum ends with a barrier): dx may alias dy.
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float xhat = (to_float(x[offset + i]) - mu) * r;
    const float g = __fmul_rn(to_float(dy[offset + i]), to_float(gamma[i]));
    dx[offset + i] = stored_dx<T, ADD_RESIDUAL>(r * (g - mean_g - xhat * mean_g_xhat),
                                                ADD_RESIDUAL ? residual[offset + i] : T{});
  }
}

// grid (column tiles, parts): partial d_gamma / d_beta of one part's rows for one column, into
// partials [parts, 2 * d] (d_gamma then d_beta).
template <typename T>
__global__ void layernorm_param_partials_generic(const T* __restrict__ dy, const T* __restrict__ x,
                                                 const float* __restrict__ mean,
                                                 const float* __restrict__ rstd, int64_t rows,
                                                 int64_t d, int64_t rows_per_part,
                                                 float* __restrict__ partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= d) return;
  const int64_t begin = blockIdx.y * rows_per_part, end = min(rows, begin + rows_per_part);
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    const float g_out = to_float(dy[r * d + col]);
    acc_gamma += g_out * (to_float(x[r * d + col]) - mean[r]) * rstd[r];
    acc_beta += g_out;
  }
  partials[blockIdx.y * 2 * d + col] = acc_gamma;
  partials[blockIdx.y * 2 * d + d + col] = acc_beta;
}

// The checks of the backward ops; residual is layernorm_backward_add's (null for the others).
void check_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                    const Tensor& mean, const Tensor& rstd, const Tensor* residual,
                    const Tensor& dx, const Tensor& d_gamma, const Tensor& d_beta) {
  layernorm_rows::check_common(op, x, gamma);
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "dy", dy, {rows, d});
  check_shape(op, "mean", mean, {rows});
  check_shape(op, "rstd", rstd, {rows});
  check_shape(op, "dx", dx, {rows, d});
  check_shape(op, "d_gamma", d_gamma, {d});
  check_shape(op, "d_beta", d_beta, {d});
  detail::require_same_dtype(op, "dy", dy, "x", x);
  detail::require_same_dtype(op, "dx", dx, "x", x);
  detail::require_dtype(op, "mean", mean, DType::f32);
  detail::require_dtype(op, "rstd", rstd, DType::f32);
  detail::require_dtype(op, "d_gamma", d_gamma, DType::f32);
  detail::require_dtype(op, "d_beta", d_beta, DType::f32);
  detail::require_on_gpu(op, {{"dy", &dy},
                              {"x", &x},
                              {"gamma", &gamma},
                              {"mean", &mean},
                              {"rstd", &rstd},
                              {"dx", &dx},
                              {"d_gamma", &d_gamma},
                              {"d_beta", &d_beta}});
  if (!residual) return;
  check_shape(op, "residual", *residual, {rows, d});
  detail::require_same_dtype(op, "residual", *residual, "x", x);
  detail::require_on_gpu(op, {{"residual", residual}});
  detail::require_disjoint(op, "dx", dx, "dy", dy);
  detail::require_disjoint_or_same(op, "dx", dx, "residual", *residual);
}

// The tails' tensors: residual for BackwardTail::add_residual; d_branch, p, key and d_branch_bias
// for BackwardTail::dropout_bias (kernels/cuda/layernorm.h). Empty where the tail has none.
struct TailTensors {
  Tensor residual, d_branch, d_branch_bias;
  float p = 0.0f;
  RngKey key;
};

// The backward ops after their checks (the shapes of kernels/cuda/layernorm.h). Returns false,
// having launched nothing, where the dropout tail cannot run in one pass: d has the generic path,
// or d_branch is not aligned for the packs layernorm_backward would use. The caller then runs
// layernorm_backward and dropout_backward_bias.
template <BackwardTail TAIL>
bool launch_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                     const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& d_gamma,
                     Tensor& d_beta, const TailTensors& tail) {
  constexpr bool kAddResidual = TAIL == BackwardTail::add_residual;
  constexpr bool kDropoutBias = TAIL == BackwardTail::dropout_bias;
  const int64_t rows = x.dim(0), d = x.dim(1);
  if (rows == 0 || d == 0) return true;
  cudaStream_t stream = current_stream();
  StreamResources& resources = stream_resources(stream);
  // The dropout tail takes the variant layernorm_backward would take: its alignment test leaves
  // d_branch out.
  const bool aligned = is_aligned16(x.data) && is_aligned16(gamma.data) && is_aligned16(dy.data) &&
                       is_aligned16(dx.data) && (!kAddResidual || is_aligned16(tail.residual.data));
  float* dgamma_out = static_cast<float*>(d_gamma.data);
  float* dbeta_out = static_cast<float*>(d_beta.data);
  bool launched = true;
  dispatch_float_dtype(x.dtype, op, "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dyp = static_cast<const T*>(dy.data);
    const T* xp = static_cast<const T*>(x.data);
    const T* gp = static_cast<const T*>(gamma.data);
    const float* mp = static_cast<const float*>(mean.data);
    const float* rp = static_cast<const float*>(rstd.data);
    const T* residualp = static_cast<const T*>(tail.residual.data);  // null but for add_residual
    T* dxp = static_cast<T*>(dx.data);
    // The expression of apply_dropout (elementwise.cu), so the scales match.
    const DropoutTail<T> dropout{static_cast<T*>(tail.d_branch.data), tail.p,
                                 1.0f / (1.0f - tail.p), tail.key};
    const bool done = layernorm_rows::with_row_variant<T>(d, aligned, [&](auto vec, auto chunks) {
      constexpr int kVec = decltype(vec)::value, kChunks = decltype(chunks)::value;
      if (kDropoutBias && kVec > 1 && !is_aligned16(tail.d_branch.data)) {
        launched = false;
        return;
      }
      constexpr int kSums = kDropoutBias ? 3 : 2;  // partial rows: d_gamma, d_beta[, d_branch_bias]
      const size_t shared_bytes =
          (kDropoutBias ? 2 + kWarpsPerBlock : 2) * static_cast<size_t>(d) * sizeof(float);
      const int64_t blocks = backward_row_blocks<T, kVec, kChunks>(rows);
      auto* partials = static_cast<float*>(
          resources.scratch(static_cast<size_t>(blocks * kSums * d) * sizeof(float)));
      layernorm_backward_rows<T, kVec, kChunks, TAIL>
          <<<static_cast<unsigned>(blocks), kRowThreads, shared_bytes, stream>>>(
              dyp, xp, gp, mp, rp, residualp, dxp, dropout, partials, rows, static_cast<int>(d));
      CUDA_CHECK_LAUNCH();
      if constexpr (kDropoutBias)
        accumulate_partial_sum_triple(partials, blocks, d, dgamma_out, dbeta_out,
                                      static_cast<float*>(tail.d_branch_bias.data), stream);
      else
        accumulate_partial_sum_pair(partials, blocks, d, dgamma_out, dbeta_out, stream);
    });
    if (done) return;
    if constexpr (kDropoutBias) {
      launched = false;
    } else {
      // Parameter gradients first: they read dy, which dx may overwrite.
      const int64_t parts = std::min<int64_t>(1024, (rows + 63) / 64);
      const int64_t rows_per_part = (rows + parts - 1) / parts;
      auto* partials = static_cast<float*>(
          resources.scratch(static_cast<size_t>(parts * 2 * d) * sizeof(float)));
      const dim3 grid(blocks_for(d, kGenericThreads), static_cast<unsigned>(parts));
      layernorm_param_partials_generic<T>
          <<<grid, kGenericThreads, 0, stream>>>(dyp, xp, mp, rp, rows, d, rows_per_part, partials);
      CUDA_CHECK_LAUNCH();
      accumulate_partial_sum_pair(partials, parts, d, dgamma_out, dbeta_out, stream);
      layernorm_backward_dx_generic<T, kAddResidual>
          <<<static_cast<unsigned>(rows), kGenericThreads, 0, stream>>>(dyp, xp, gp, mp, rp,
                                                                        residualp, dxp, d);
      CUDA_CHECK_LAUNCH();
    }
  });
  return launched;
}

}  // namespace

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& d_gamma, Tensor& d_beta) {
  constexpr const char* op = "layernorm_backward";
  check_backward(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta);
  launch_backward<BackwardTail::none>(op, dy, x, gamma, mean, rstd, dx, d_gamma, d_beta, {});
}

void layernorm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                            const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                            Tensor& dx, Tensor& d_gamma, Tensor& d_beta) {
  constexpr const char* op = "layernorm_backward_add";
  check_backward(op, dy, x, gamma, mean, rstd, &residual, dx, d_gamma, d_beta);
  TailTensors tail;
  tail.residual = residual;
  launch_backward<BackwardTail::add_residual>(op, dy, x, gamma, mean, rstd, dx, d_gamma, d_beta,
                                              tail);
}

void layernorm_backward_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                     const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                     Tensor& d_gamma, Tensor& d_beta, Tensor& d_branch, float p,
                                     const RngKey& key, Tensor& d_branch_bias) {
  constexpr const char* op = "layernorm_backward_dropout_bias";
  check_backward(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta);
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "d_branch", d_branch, {rows, d});
  detail::require_same_dtype(op, "d_branch", d_branch, "x", x);
  check_shape(op, "d_branch_bias", d_branch_bias, {d});
  detail::require_dtype(op, "d_branch_bias", d_branch_bias, DType::f32);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"d_branch", &d_branch}, {"d_branch_bias", &d_branch_bias}});
  detail::require_disjoint_or_same(op, "dx", dx, "dy", dy);
  detail::require_disjoint(op, "dx", dx, "x", x);
  detail::require_disjoint(op, "d_branch", d_branch, "dy", dy);
  detail::require_disjoint(op, "d_branch", d_branch, "x", x);
  detail::require_disjoint(op, "d_branch", d_branch, "dx", dx);
  detail::require_disjoint(op, "d_branch_bias", d_branch_bias, "dy", dy);
  detail::require_disjoint(op, "d_branch_bias", d_branch_bias, "dx", dx);
  detail::require_disjoint(op, "d_branch_bias", d_branch_bias, "d_branch", d_branch);
  TailTensors tail;
  tail.d_branch = d_branch;
  tail.p = p;
  tail.key = key;
  tail.d_branch_bias = d_branch_bias;
  if (launch_backward<BackwardTail::dropout_bias>(op, dy, x, gamma, mean, rstd, dx, d_gamma, d_beta,
                                                  tail))
    return;
  // Widths of the generic path (whose dx is one block per row, and d_branch_bias a column sum), or
  // a d_branch off the alignment of the packs: the two ops, which give these bits by definition.
  layernorm_backward(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta);
  dropout_backward_bias(dx, d_branch, p, key, d_branch_bias);
}

}  // namespace nmt::cuda
