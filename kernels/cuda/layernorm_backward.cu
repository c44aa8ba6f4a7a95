// LayerNorm backward on the GPU, with its tails: layernorm_backward_add (the pre-norm residual's
// add), layernorm_backward_dropout_bias (the post-norm sublayer's dropout backward and the
// branch's bias gradient) and layernorm_backward_add_dropout_bias (both: the pre-norm sublayer's
// residual add, then the dropout backward and bias gradient of the dx stored). The register path
// (layernorm_rows.cuh: one warp per row, rows of up to 1024 columns) runs one grid's worth of
// blocks whose warps stride over the rows, adding their columns' parameter-gradient terms into
// per-warp sums in shared memory; parameter gradients are per-block partial sums plus an ordered
// second pass (reduce.h): deterministic, no float atomics. Other rows take a block-per-row path
// through global memory. The tails are the same kernels with the extra work done where dx is stored
// (BackwardTail), so dx, d_gamma and d_beta are the plain backward's bits.
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
  add_residual_dropout_bias,  // layernorm_backward_add_dropout_bias: add_residual's dx, then
                              // dropout_bias's d_branch and d_branch_bias from that dx
};

// Whether a tail adds the residual to dx, and whether it stores d_branch and sums it.
constexpr bool adds_residual(BackwardTail tail) {
  return tail == BackwardTail::add_residual || tail == BackwardTail::add_residual_dropout_bias;
}
constexpr bool has_dropout_bias(BackwardTail tail) {
  return tail == BackwardTail::dropout_bias || tail == BackwardTail::add_residual_dropout_bias;
}

// The dropout tail's arguments (unused by the other tails): d_branch [rows, d] T, the mask of key
// with probability p (keep_scale = 1 / (1 - p)); keep_bytes: null, or that mask as the forward
// stored it (kernels/philox.h: bit e % 8 of byte e / 8), which the 8-element packs' variants read
// instead of drawing it.
template <typename T>
struct DropoutTail {
  T* d_branch;
  float p, keep_scale;
  RngKey key;
  const uint8_t* keep_bytes;
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

// Where the register path keeps its parameter sums. Each warp owns a row of kSpan floats per sum
// in shared memory and each lane adds its own columns' terms into it, so a column's sum in a warp
// is that warp's rows in row order, as in registers, without the registers: lane l's column
// (c * 32 + l) * VEC + i sits in group q = i / kQuad of its pack c, at ((c * kQuads + q) * 32 + l)
// * kQuad. A group is 16 bytes where VEC is a multiple of 4 (one shared access), and a warp's
// access to one group of its packs covers 512 contiguous bytes: no bank conflicts, where the
// columns' own order (lanes 32 bytes apart for 16-bit packs) would take twice the wavefronts.
template <int VEC, int CHUNKS>
struct LaneSums {
  static constexpr int kQuad = VEC % 4 == 0 ? 4 : 1;
  static constexpr int kQuads = VEC / kQuad;
  static constexpr int kSpan = VEC * CHUNKS * 32;  // the widest row of the variant
  using Group = Pack<float, kQuad>;
  __device__ static int group(int lane, int c, int q) {
    return ((c * kQuads + q) * 32 + lane) * kQuad;
  }
  // The first column of the group at `place` = (c * kQuads + q) * 32 + lane (a group's kQuad
  // columns are consecutive).
  __device__ static int column_of(int place) {
    return ((place / (32 * kQuads)) * 32 + place % 32) * VEC + (place / 32) % kQuads * kQuad;
  }
};

// Whether layernorm_backward_add_dropout_bias runs the register-path variant in one pass. Not the
// f32 one-element variant of eight columns a lane (f32 rows of up to 256 columns off the 4-element
// packs): with both tails it spilled at its four blocks' 64 registers (either way of loading the
// residual), and taking three blocks would shrink every tail's grid (backward_row_blocks). There
// the op runs layernorm_backward_add then dropout_backward_bias.
template <typename T, int VEC, int CHUNKS>
constexpr bool add_dropout_bias_fused() {
  return !(sizeof(T) == 4 && VEC == 1 && CHUNKS == 8);
}

// Blocks per multiprocessor the register path is compiled for (__launch_bounds__, so at most 64,
// 80 or 128 registers a thread), by the bytes of one [rows, d] tensor a lane holds of a row: 4 up
// to 32 bytes (d <= 512 in bf16 / f16, <= 256 in f32), 3 up to 64 (d <= 1024 in bf16 / f16, <= 512
// in f32), 2 above (f32 up to 1024). Each holds what its shared sums allow (see below).
// layernorm_backward_add_dropout_bias's kernel (both tails) is compiled for the blocks the dropout
// tail holds: two from 64 bytes a lane, where the third row of shared sums allows no more (106
// registers for bf16 / f16, where three blocks' 80 spilled), and five for the one-element variant
// of two columns a lane (48 registers, as the dropout tail).
template <typename T, int VEC, int CHUNKS, BackwardTail TAIL>
constexpr int backward_min_blocks() {
  constexpr int bytes = VEC * CHUNKS * static_cast<int>(sizeof(T));
  if constexpr (TAIL == BackwardTail::add_residual_dropout_bias) {
    if (bytes > 32) return 2;
    if (VEC == 1 && CHUNKS == 2) return 5;
  }
  return bytes <= 32 ? 4 : bytes <= 64 ? 3 : 2;
}

// Warps stride over rows, one row at a time: a lane loads its packs of dy and x (and, for rows of
// up to 32 bytes a lane, the residual), draws the row's dropout mask (or loads the bytes of it the
// forward stored) while they are in flight, makes the two row sums (warp_sum), stores dx (and
// d_branch), then adds its columns' d_gamma / d_beta terms (and the stored d_branch values) into
// its warp's shared sums (LaneSums). At the end the block adds its warps' sums in warp order and
// writes one partial row [d_gamma | d_beta] (with the dropout tail [d_gamma | d_beta |
// d_branch_bias]); an ordered second pass (reduce.h) adds the blocks' rows. Each column's sum is
// each warp's rows in row order, then the warps in order, then the blocks in order, on the grid of
// backward_row_blocks: the same for every tail.
//
// Why the sums are in shared memory and no row is prefetched: the kernel used to keep them in
// registers (2 * VEC * CHUNKS floats a lane) and load the warp's next row while computing one. The
// bf16 d = 512 variant then needed 125 registers, two 256-thread blocks (16 warps) per
// multiprocessor, and bf16 d = 1024 or f32 from d = 512 needed 142 to 255 registers, one block (8
// warps): too few warps to cover the loads' latency and each row's dependent chain (two warp sums,
// the mask's Philox rounds), and at 8192 x 512 the dropout tail ran at a third of its memory
// floor. Now a lane holds one row's packs of dy and x (gamma's packs are read again where used,
// L1 hits): 56 to 64 registers up to 32 bytes a lane (d <= 512 in bf16 / f16, <= 256 in f32),
// four blocks (32 warps) per multiprocessor; 72 to 80 up to 64 bytes, three; 96 to 127 (f32 up to
// 1024), two (backward_min_blocks). The many warps' loads in flight replace each warp's second row:
// 32 warps x 2 KiB of dy and x at bf16 d = 512 is about twice what the memory's latency needs. The
// shared sums cost a lane 2 * VEC * CHUNKS / 4 reads and as many writes of 16 bytes a row (3 * with
// the dropout tail), conflict-free, about a quarter of the shared memory's bandwidth at the memory
// floor, and a block kWarpsPerBlock * kSums * kSpan floats: 32 KiB for the variants of up to 512
// columns (48 KiB with the dropout tail), 64 KiB up to 1024 (96 KiB). A Hopper multiprocessor's 228
// KiB hold the blocks above but for the dropout tail of bf16 / f16 rows over 512 columns: two
// blocks where the registers allow three (see backward_row_blocks).
//
// ADD_RESIDUAL: dx = residual + the input gradient (stored_dx); residual may be dx: a lane reads
// each residual pack of a row before it writes the same pack of dx. Up to 32 bytes a lane the
// packs come with dy and x; wider rows (held through the row sums they spilled) load pack c + 1
// before storing pack c of dx, one pack ahead. DROPOUT_BIAS: after storing a dx pack the lane
// stores d_branch = dx * the pack's dropout scales (dropout_kernel's product of the stored dx,
// rounded to T; a copy of dx when p is 0) and adds the stored values into its warp's third row of
// sums. The mask of the row is drawn into one word per lane while the row's loads are in flight:
// two Philox blocks a pack, about half of the kernel's instructions at bf16 d = 512, where it was
// bound by issue, not memory. With keep_bytes (8-element packs only) the lane loads its packs'
// bytes instead: the forward drew the same bits (dropout_residual_layernorm_forward), so every
// result is the same; a warp's bytes of a chunk are 32 consecutive ones (pack c of lane l at
// (row * d) / 8 + c * 32 + l), one sector.
// ADD_RESIDUAL_DROPOUT_BIAS does both, in that order: d_branch is the dropout backward of the dx
// stored with the residual (layernorm_backward_add then dropout_backward_bias); d_branch may not
// overlap the residual, which is read after d_branch packs of the row are stored.
template <typename T, int VEC, int CHUNKS, BackwardTail TAIL>
__global__ void __launch_bounds__(kRowThreads, backward_min_blocks<T, VEC, CHUNKS, TAIL>())
    layernorm_backward_rows(const T* dy, const T* __restrict__ x, const T* __restrict__ gamma,
                            const float* __restrict__ mean, const float* __restrict__ rstd,
                            const T* residual, T* dx, DropoutTail<T> dropout,
                            float* __restrict__ partials, int64_t rows, int d) {
  constexpr bool ADD_RESIDUAL = adds_residual(TAIL);
  constexpr bool DROPOUT_BIAS = has_dropout_bias(TAIL);
  constexpr int kSums = DROPOUT_BIAS ? 3 : 2;
  static_assert(VEC * CHUNKS <= 32, "a lane's dropout mask is one 32-bit word");
  using P = Pack<T, VEC>;
  using S = LaneSums<VEC, CHUNKS>;
  using G = typename S::Group;
  constexpr int kQuad = S::kQuad;
  // With ADD_RESIDUAL: whether the residual's packs are loaded with dy and x, or one pack ahead
  // of the dx stores (also with both tails in the one-element variant of 8 columns a lane, which
  // spilled holding them).
  constexpr bool kResidualWithRow =
      VEC * CHUNKS * sizeof(T) <= 32 && !(ADD_RESIDUAL && DROPOUT_BIAS && VEC == 1 && CHUNKS > 2);
  // [kWarpsPerBlock][kSums][S::kSpan]: each warp's d_gamma, d_beta (and d_branch_bias) sums.
  extern __shared__ float4 shared_sums[];
  float* const block_sums = reinterpret_cast<float*>(shared_sums);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* const sums = block_sums + warp * kSums * S::kSpan;  // this warp's rows
  // gamma's packs are read where they are used (L1 hits after the first row), not held.
  const auto gamma_pack = [&](int c) {
    return *reinterpret_cast<const P*>(gamma + (c * 32 + lane) * VEC);
  };
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    // The lane's own groups: no other thread touches them before the barrier at the end.
#pragma unroll
    for (int q = 0; q < S::kQuads; ++q)
#pragma unroll
      for (int s = 0; s < kSums; ++s)
        *reinterpret_cast<G*>(sums + s * S::kSpan + S::group(lane, c, q)) = G{};
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; row < rows;
       row += stride) {
    // dx may alias dy (and be the residual): the lane reads its packs of the row before it writes
    // them, and rows are disjoint between warps.
    P dys[CHUNKS], xs[CHUNKS], residuals[CHUNKS]{};
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + lane) * VEC;
      if (col < d) {
        dys[c] = *reinterpret_cast<const P*>(dy + row * d + col);
        xs[c] = *reinterpret_cast<const P*>(x + row * d + col);
        if constexpr (ADD_RESIDUAL && kResidualWithRow)
          residuals[c] = *reinterpret_cast<const P*>(residual + row * d + col);
      }
    }
    const float mu = mean[row], r = rstd[row];
    // Bit c * VEC + i: whether the row's element at column (c * 32 + lane) * VEC + i is kept.
    uint32_t keep = 0;
    if constexpr (DROPOUT_BIAS) {
      if (dropout.p > 0.0f) {
        // The bytes the forward stored (8-element packs only), else the draws.
        bool from_forward = false;
        if constexpr (VEC == 8) {
          if (dropout.keep_bytes != nullptr) {
            from_forward = true;
#pragma unroll
            for (int c = 0; c < CHUNKS; ++c) {
              const int col = (c * 32 + lane) * VEC;
              if (col < d)
                keep |= static_cast<uint32_t>(dropout.keep_bytes[(row * d + col) / 8]) << (c * VEC);
            }
          }
        }
        if (!from_forward)
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c) {
            const int col = (c * 32 + lane) * VEC;
            if (col < d)
              keep |= dropout_keep_bits<VEC>(dropout.key, row * d + col, dropout.p) << (c * VEC);
          }
      }
    }
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
      if ((c * 32 + lane) * VEC < d) {
        const P gs = gamma_pack(c);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float xhat = (pack_element(xs[c], i) - mu) * r;
          // Rounded product (no FMA contraction), the same value as in the dx formula below, so
          // g - mean(g) is exactly 0 where it should be (d = 1).
          const float g = __fmul_rn(pack_element(dys[c], i), pack_element(gs, i));
          sum_g += g;
          sum_g_xhat += g * xhat;
        }
      }
    const float mean_g = warp_sum(sum_g) / d, mean_g_xhat = warp_sum(sum_g_xhat) / d;
    const auto load_residual = [&](int c) {
      const int col = (c * 32 + lane) * VEC;
      if (col < d) residuals[c] = *reinterpret_cast<const P*>(residual + row * d + col);
    };
    if constexpr (ADD_RESIDUAL && !kResidualWithRow) load_residual(0);
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const int col = (c * 32 + lane) * VEC;
      // The next pack's residual is loaded before this pack's dx is stored (other columns).
      if constexpr (ADD_RESIDUAL && !kResidualWithRow)
        if (c + 1 < CHUNKS) load_residual(c + 1);
      if (col < d) {
        const P gs = gamma_pack(c);
        P out;
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float xhat = (pack_element(xs[c], i) - mu) * r;
          const float g = __fmul_rn(pack_element(dys[c], i), pack_element(gs, i));
          out.v[i] =
              stored_dx<T, ADD_RESIDUAL>(r * (g - mean_g - xhat * mean_g_xhat), residuals[c].v[i]);
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
          // The sums of the stored d_branch values.
#pragma unroll
          for (int q = 0; q < S::kQuads; ++q) {
            G* const branch_at = reinterpret_cast<G*>(sums + 2 * S::kSpan + S::group(lane, c, q));
            G sum_branch = *branch_at;
#pragma unroll
            for (int j = 0; j < kQuad; ++j)
              sum_branch.v[j] = __fadd_rn(sum_branch.v[j], to_float(dropped.v[q * kQuad + j]));
            *branch_at = sum_branch;
          }
        }
      }
    }
    // The lane's d_gamma / d_beta terms added into its warp's sums (explicit roundings: every
    // tail adds the same values the same way, whatever nvcc would contract).
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
      if ((c * 32 + lane) * VEC < d)
#pragma unroll
        for (int q = 0; q < S::kQuads; ++q) {
          G* const gamma_at = reinterpret_cast<G*>(sums + S::group(lane, c, q));
          G* const beta_at = reinterpret_cast<G*>(sums + S::kSpan + S::group(lane, c, q));
          G sum_gamma = *gamma_at, sum_beta = *beta_at;
#pragma unroll
          for (int j = 0; j < kQuad; ++j) {
            const int i = q * kQuad + j;
            const float g_out = pack_element(dys[c], i);
            const float xhat = (pack_element(xs[c], i) - mu) * r;
            sum_gamma.v[j] = __fmaf_rn(g_out, xhat, sum_gamma.v[j]);
            sum_beta.v[j] = __fadd_rn(sum_beta.v[j], g_out);
          }
          *gamma_at = sum_gamma;
          *beta_at = sum_beta;
        }
  }
  __syncthreads();
  // Each partial column: the warps' sums in warp order, a group (kQuad consecutive columns, one
  // shared access a warp) at a time; its place and column come from compile-time strides, so the
  // block's last step has no division by d (it was a quarter of the kernel's instructions).
  float* const block_partials = partials + static_cast<int64_t>(blockIdx.x) * kSums * d;
  constexpr int kGroups = S::kSpan / kQuad;  // a sum's groups
  for (int k = threadIdx.x; k < kSums * kGroups; k += blockDim.x) {
    const int s = k / kGroups, place = k % kGroups;  // place = (c * kQuads + q) * 32 + lane
    const int col = S::column_of(place);
    if (col >= d) continue;
    const float* const at = block_sums + s * S::kSpan + place * kQuad;
    G total{};  // from zero, as the sums always began (-0 sums stay +0)
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      const G more = *reinterpret_cast<const G*>(at + w * kSums * S::kSpan);
#pragma unroll
      for (int j = 0; j < kQuad; ++j) total.v[j] += more.v[j];
    }
    *reinterpret_cast<G*>(block_partials + s * d + col) = total;
  }
}

// The register path's dynamic shared memory for a tail (the warps' sums), and its kernel with
// that memory allowed (above the default 48 KiB from d > 512) and the largest shared-memory
// carveout preferred (four blocks of the dropout tail at d <= 512 take 196 KiB with their
// reserved memory; the kernel reads little through L1), both set once per process.
template <typename T, int VEC, int CHUNKS, BackwardTail TAIL>
constexpr size_t backward_rows_shared_bytes() {
  return static_cast<size_t>(kWarpsPerBlock) * (has_dropout_bias(TAIL) ? 3 : 2) *
         LaneSums<VEC, CHUNKS>::kSpan * sizeof(float);
}

template <typename T, int VEC, int CHUNKS, BackwardTail TAIL>
auto backward_rows_kernel() {
  static const auto kernel = [] {
    const auto k = layernorm_backward_rows<T, VEC, CHUNKS, TAIL>;
    CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(backward_rows_shared_bytes<T, VEC, CHUNKS, TAIL>())));
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    return k;
  }();
  return kernel;
}

// Blocks of the register path's grid for `rows` rows: enough to fill the GPU once, with as many
// blocks per multiprocessor as every tail's kernel holds (the least of the four), so that every
// backward op of this variant adds d_gamma and d_beta in the same order on the same GPU (the
// tails' bit-for-bit equality with the unfused ops rests on it) and none takes a second, partial
// wave. Warps then stride over the rows, so the partial sums stay few (one row of d per block).
// The tails hold the same blocks but where the dropout tails' third row of sums does not fit:
// from 64 bytes a lane (d > 512 in bf16 / f16) they hold two blocks where the others hold three.
template <typename T, int VEC, int CHUNKS>
int64_t backward_row_blocks(int64_t rows) {
  static const int per_sm = [] {
    const auto blocks = [](auto kernel, size_t shared_bytes) {
      return resident_blocks_per_sm(kernel, kRowThreads, shared_bytes);
    };
    constexpr BackwardTail kNone = BackwardTail::none, kAdd = BackwardTail::add_residual,
                           kDropout = BackwardTail::dropout_bias,
                           kAddDropout = BackwardTail::add_residual_dropout_bias;
    int fused = 1 << 30;  // the add-and-dropout tail's blocks, where it runs
    if constexpr (add_dropout_bias_fused<T, VEC, CHUNKS>())
      fused = blocks(backward_rows_kernel<T, VEC, CHUNKS, kAddDropout>(),
                     backward_rows_shared_bytes<T, VEC, CHUNKS, kAddDropout>());
    return std::min({fused,
                     blocks(backward_rows_kernel<T, VEC, CHUNKS, kNone>(),
                            backward_rows_shared_bytes<T, VEC, CHUNKS, kNone>()),
                     blocks(backward_rows_kernel<T, VEC, CHUNKS, kAdd>(),
                            backward_rows_shared_bytes<T, VEC, CHUNKS, kAdd>()),
                     blocks(backward_rows_kernel<T, VEC, CHUNKS, kDropout>(),
                            backward_rows_shared_bytes<T, VEC, CHUNKS, kDropout>())});
  }();
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

// The dropout-bias tail's checks, after check_backward: d_branch [rows, d] in x's dtype and
// d_branch_bias [d] f32 on the GPU, p a dropout rate, keep_bits empty or the mask's words on the
// GPU apart from what the tail writes, and the overlaps the tail forbids. Without a residual dx
// may be dy itself (in place); with one, check_backward already kept dx apart from dy, and
// d_branch must stay apart from the residual too.
void check_branch_tail(const char* op, const Tensor& dy, const Tensor& x, const Tensor* residual,
                       const Tensor& dx, const Tensor& d_branch, float p,
                       const Tensor& d_branch_bias, const Tensor& keep_bits) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  check_shape(op, "d_branch", d_branch, {rows, d});
  detail::require_same_dtype(op, "d_branch", d_branch, "x", x);
  check_shape(op, "d_branch_bias", d_branch_bias, {d});
  detail::require_dtype(op, "d_branch_bias", d_branch_bias, DType::f32);
  detail::require_dropout_p(op, p);
  detail::require_on_gpu(op, {{"d_branch", &d_branch}, {"d_branch_bias", &d_branch_bias}});
  detail::require_branch_tail_apart(op, dy, x, residual, dx, d_branch, d_branch_bias);
  detail::require_keep_bits(op, keep_bits, rows, d, {{"dx", &dx}, {"d_branch", &d_branch}});
  detail::require_optional_on_gpu(op, {{"keep_bits", &keep_bits}});
}

// The tails' tensors: residual for BackwardTail::add_residual; d_branch, p, key, d_branch_bias (and
// the optional keep_bits) for BackwardTail::dropout_bias; all of them for
// BackwardTail::add_residual_dropout_bias (kernels/cuda/layernorm.h). Empty where the tail has
// none.
struct TailTensors {
  Tensor residual, d_branch, d_branch_bias, keep_bits;
  float p = 0.0f;
  RngKey key;
};

// The backward ops after their checks (the shapes of kernels/cuda/layernorm.h). Returns false,
// having launched nothing, where a dropout tail cannot run in one pass: d has the generic path, or
// d_branch is not aligned for the packs layernorm_backward (layernorm_backward_add) would use. The
// caller then runs that op and dropout_backward_bias.
template <BackwardTail TAIL>
bool launch_backward(const char* op, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                     const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& d_gamma,
                     Tensor& d_beta, const TailTensors& tail) {
  constexpr bool kAddResidual = adds_residual(TAIL);
  constexpr bool kDropoutBias = has_dropout_bias(TAIL);
  const int64_t rows = x.dim(0), d = x.dim(1);
  if (rows == 0 || d == 0) return true;
  cudaStream_t stream = current_stream();
  StreamResources& resources = stream_resources(stream);
  // The dropout tails take the variant layernorm_backward (layernorm_backward_add) would take: the
  // alignment test leaves d_branch out.
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
    const T* residualp = static_cast<const T*>(tail.residual.data);  // null without the add
    T* dxp = static_cast<T*>(dx.data);
    // The expression of apply_dropout (elementwise.cu), so the scales match.
    const DropoutTail<T> dropout{static_cast<T*>(tail.d_branch.data), tail.p,
                                 1.0f / (1.0f - tail.p), tail.key,
                                 static_cast<const uint8_t*>(tail.keep_bits.data)};
    const bool done = layernorm_rows::with_row_variant<T>(d, aligned, [&](auto vec, auto chunks) {
      constexpr int kVec = decltype(vec)::value, kChunks = decltype(chunks)::value;
      if (kDropoutBias && kVec > 1 && !is_aligned16(tail.d_branch.data)) {
        launched = false;
        return;
      }
      if constexpr (TAIL == BackwardTail::add_residual_dropout_bias &&
                    !add_dropout_bias_fused<T, kVec, kChunks>()) {
        launched = false;
        return;
      } else {
        constexpr int kSums =
            kDropoutBias ? 3 : 2;  // partial rows: d_gamma, d_beta[, d_branch_bias]
        const int64_t blocks = backward_row_blocks<T, kVec, kChunks>(rows);
        // The second pass waits for an active deferral's flush where it has room (reduce.h).
        PartialSumPass pass(blocks, d, kSums, stream);
        const auto kernel = backward_rows_kernel<T, kVec, kChunks, TAIL>();
        constexpr size_t kSharedBytes = backward_rows_shared_bytes<T, kVec, kChunks, TAIL>();
        kernel<<<static_cast<unsigned>(blocks), kRowThreads, kSharedBytes, stream>>>(
            dyp, xp, gp, mp, rp, residualp, dxp, dropout, pass.partials(), rows,
            static_cast<int>(d));
        CUDA_CHECK_LAUNCH();
        pass.finish(dgamma_out, dbeta_out,
                    kDropoutBias ? static_cast<float*>(tail.d_branch_bias.data) : nullptr);
      }
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

int64_t layernorm_backward_partial_floats(int64_t rows, int64_t d, DType dtype) {
  if (rows <= 0 || d <= 0) return 0;
  int64_t floats = 0;
  dispatch_float_dtype(dtype, "layernorm_backward_partial_floats", "dtype", [&](auto tag) {
    using T = typename decltype(tag)::type;
    layernorm_rows::with_row_variant<T>(d, /*aligned=*/true, [&](auto vec, auto chunks) {
      constexpr int kVec = decltype(vec)::value, kChunks = decltype(chunks)::value;
      floats = backward_row_blocks<T, kVec, kChunks>(rows) * 3 * d;  // the triple's partials
    });
  });
  return floats;
}

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
                                     const RngKey& key, Tensor& d_branch_bias,
                                     const Tensor& keep_bits) {
  constexpr const char* op = "layernorm_backward_dropout_bias";
  check_backward(op, dy, x, gamma, mean, rstd, nullptr, dx, d_gamma, d_beta);
  check_branch_tail(op, dy, x, nullptr, dx, d_branch, p, d_branch_bias, keep_bits);
  TailTensors tail;
  tail.d_branch = d_branch;
  tail.p = p;
  tail.key = key;
  tail.d_branch_bias = d_branch_bias;
  tail.keep_bits = keep_bits;
  if (launch_backward<BackwardTail::dropout_bias>(op, dy, x, gamma, mean, rstd, dx, d_gamma, d_beta,
                                                  tail))
    return;
  // Widths of the generic path (whose dx is one block per row, and d_branch_bias a column sum), or
  // a d_branch off the alignment of the packs: the two ops, which give these bits by definition.
  layernorm_backward(dy, x, gamma, mean, rstd, dx, d_gamma, d_beta);
  dropout_backward_bias(dx, d_branch, p, key, d_branch_bias, keep_bits);
}

void layernorm_backward_add_dropout_bias(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& rstd,
                                         const Tensor& residual, Tensor& dx, Tensor& d_gamma,
                                         Tensor& d_beta, Tensor& d_branch, float p,
                                         const RngKey& key, Tensor& d_branch_bias,
                                         const Tensor& keep_bits) {
  constexpr const char* op = "layernorm_backward_add_dropout_bias";
  // layernorm_backward_add's checks (dx apart from dy; the residual itself or apart from it).
  check_backward(op, dy, x, gamma, mean, rstd, &residual, dx, d_gamma, d_beta);
  check_branch_tail(op, dy, x, &residual, dx, d_branch, p, d_branch_bias, keep_bits);
  TailTensors tail;
  tail.residual = residual;
  tail.d_branch = d_branch;
  tail.p = p;
  tail.key = key;
  tail.d_branch_bias = d_branch_bias;
  tail.keep_bits = keep_bits;
  if (launch_backward<BackwardTail::add_residual_dropout_bias>(op, dy, x, gamma, mean, rstd, dx,
                                                               d_gamma, d_beta, tail))
    return;
  // The generic path's widths, a d_branch off the alignment of the packs, or the one variant not
  // fused (add_dropout_bias_fused): the two ops, which give these bits by definition.
  layernorm_backward_add(dy, x, gamma, mean, rstd, residual, dx, d_gamma, d_beta);
  dropout_backward_bias(dx, d_branch, p, key, d_branch_bias, keep_bits);
}

}  // namespace nmt::cuda
