// The feed-forward block's first product with its whole tail: y = dropout(max(x wᵀ + b, 0)) and
// the bits of y > 0, one kernel of our own on Hopper, where the cuBLASLt path writes
// relu(x wᵀ + b) and a dropout kernel reads and writes it again.
//
// Block (384 threads, persistent over [128 x 256] tiles of y):
// - warp 8, the producer: one lane issues the TMA loads of x's [128 x 64] and w's [256 x 64]
//   slices into a 3-stage ring (tma_pipeline.cuh);
// - warps 0-7, two consumer warpgroups: m64n256k16 products (wgmma_wide.cuh) on their [64 x 256]
//   halves, one k-block in flight, a stage released as soon as its products completed; then
//   relu(acc + b) rounded to T into a shared-memory staging tile (what cuBLASLt's epilogue
//   stores), and they drain its last 96 rows themselves before the next tile's products;
// - warps 9-11, the epilogue: they drain the first 32 rows while the consumers run the next
//   tile's products.
// Draining a row: lane l takes its 8-element chunk, draws the chunk's Philox block (the draw of
// dropout_kernel, dropout_mask.cuh), scales, rounds, stores 16 bytes of y and its byte of the
// bits (four lanes a 32-bit word). So y and the bits are the two-kernel path's but for the
// products' summation order.
//
// Speed (docs/perf.md, session 25): the products alone beat cuBLASLt's by 14-27% at fc1's shapes,
// but draining costs about as much again, and the kernel only ties the two it replaces (base's
// fc1 54 us against 55): NMT_FUSED_FC1 stays off by default.
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_relu_dropout.h"
#include "kernels/cuda/stream.h"
#include "kernels/cuda/tma_pipeline.cuh"
#include "kernels/cuda/wgmma_wide.cuh"
#include "kernels/env_switch.h"
#include "kernels/half_bits.h"
#include "kernels/op_checks.h"
#include "kernels/philox.h"

namespace nmt::cuda {
namespace {

EnvSwitch fused_switch("NMT_FUSED_FC1", /*default_on=*/false);

constexpr int kTileM = 128, kTileN = 256, kTileK = 64, kStages = 3;
// Warps 0-7: the consumers; warp 8: the producer; warps 9-11: the epilogue. 384 threads leave 168
// registers a thread, what the consumers' 128 accumulators need (ptxas allocates for the block's
// launch size, so a fourth warpgroup would cut every thread to 128, too few for m64n256k16).
constexpr int kConsumerThreads = 256, kEpilogueWarps = 3, kThreads = 384;
constexpr int kABytes = kTileM * kTileK * 2, kBBytes = kTileN * kTileK * 2;
constexpr int kStageBytes = kABytes + kBBytes;
// The staging tile: relu(acc + b) as T, [128][264] (8 elements of padding a row, so that the
// consumers' 4-byte writes of 8 rows x 4 lanes fall in 32 different banks).
constexpr int kStagingStride = kTileN + 8;
constexpr int kStagingBytes = kTileM * kStagingStride * 2;
constexpr size_t kSmemBytes =
    size_t{kStages} * kStageBytes + kStagingBytes + 2 * kStages * 8 + 1024;
// Named barriers between the consumers and the epilogue warpgroup (0 is __syncthreads).
constexpr int kStagingFull = 1, kStagingEmpty = 2, kConsumersStaged = 3,
              kStagingThreads = kConsumerThreads + 32 * kEpilogueWarps;

// The staged rows 0.. that the epilogue warps drain while the consumers run the next tile's
// products; the consumers drain the other 96 before they start it. The best of 0-80 at all three
// of bench-kernels' fc1 shapes (docs/perf.md, session 25).
constexpr int kEpilogueRows = 32;

struct Problem {
  int rows, out, k_blocks, m_tiles, tiles;
  float keep_scale;
  uint32_t threshold;  // dropout keeps an element where its 16-bit uniform >= threshold
};

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <typename T>
__device__ __forceinline__ float low_half(uint32_t pair) {
  const uint16_t u = static_cast<uint16_t>(pair);
  T v;
  memcpy(&v, &u, 2);
  return to_float(v);
}

// A consumer thread's share of a tile into the staging tile: relu(acc + b) rounded to T (what
// cuBLASLt's bias + ReLU epilogue stores), rows `local_row` and local_row + 8, columns n0.. .
template <typename T>
__device__ __forceinline__ void stage_tile(const float (&d)[128], const T* __restrict__ bias,
                                           T* staging, int local_row, int n0, int out) {
  const int t4 = threadIdx.x % 4;
  uint32_t* row0 = reinterpret_cast<uint32_t*>(staging + local_row * kStagingStride) + t4;
  uint32_t* row8 = reinterpret_cast<uint32_t*>(staging + (local_row + 8) * kStagingStride) + t4;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    const int col = n0 + 8 * j + 2 * t4;
    const uint32_t bias_pair =
        col < out ? *reinterpret_cast<const uint32_t*>(bias + col) : 0u;  // out % 32 == 0
    const float b0 = low_half<T>(bias_pair), b1 = low_half<T>(bias_pair >> 16);
    row0[4 * j] = pack2<T>(fmaxf(d[4 * j] + b0, 0.0f), fmaxf(d[4 * j + 1] + b1, 0.0f));
    row8[4 * j] = pack2<T>(fmaxf(d[4 * j + 2] + b0, 0.0f), fmaxf(d[4 * j + 3] + b1, 0.0f));
  }
}

// The epilogue warps' pass over a staged tile: dropout (the Philox block of each 8-element chunk,
// dropout_kernel's draw), y's 16-byte stores and the bits of y > 0. Epilogue warp w takes rows
// w, w + 3, w + 6, ..., kDrainRows of them at a time (independent Philox chains for the warp to
// interleave); lane l takes chunk l of a row (columns n0 + 8l ..). The consumers can drain 4 at a
// time because a tile's first product only writes the accumulators (mma_n256_first): with a
// read-write first product the 128 stayed live through the drain, and 4 rows spilled.
template <typename T, int kWarps, int kDrainRows>
__device__ __forceinline__ void drain_rows(const T* staging, T* __restrict__ y,
                                           uint32_t* __restrict__ bits, int m0, int n0,
                                           int row_begin, int row_end, int warp, const Problem& pr,
                                           const RngKey& key) {
  constexpr uint32_t kInfinity =
      std::is_same_v<T, __nv_bfloat16> ? kBf16InfinityBits : kF16InfinityBits;
  const int lane = threadIdx.x % 32;
  const int col = n0 + 8 * lane;
  const bool col_ok = col < pr.out;
#pragma unroll 1
  for (int base = row_begin + warp; base < row_end; base += kWarps * kDrainRows) {
    uint4 in[kDrainRows];
    Philox4 draw[kDrainRows];
#pragma unroll
    for (int h = 0; h < kDrainRows; ++h) {
      const int r = min(base + kWarps * h, row_end - 1);
      in[h] = *reinterpret_cast<const uint4*>(staging + r * kStagingStride + 8 * lane);
      draw[h] = dropout_block(key, (static_cast<uint64_t>(m0 + r) * pr.out + col) / 8);
    }
#pragma unroll
    for (int h = 0; h < kDrainRows; ++h) {
      const int r = base + kWarps * h;
      const uint32_t pairs[4] = {in[h].x, in[h].y, in[h].z, in[h].w};
      uint32_t out_pairs[4], positive = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t word = draw[h].v[k];
        const float s0 = (word & 0xFFFFu) >= pr.threshold ? pr.keep_scale : 0.0f;
        const float s1 = (word >> 16) >= pr.threshold ? pr.keep_scale : 0.0f;
        out_pairs[k] = pack2<T>(low_half<T>(pairs[k]) * s0, low_half<T>(pairs[k] >> 16) * s1);
        // y > 0 as dropout_kernel tests it: not for -0 or a NaN (f16's inf * 0 where acc + b
        // overflowed and the element was dropped).
        positive |= (half_bits_positive(out_pairs[k], kInfinity) ? 1u : 0u) << (2 * k);
        positive |= (half_bits_positive(out_pairs[k] >> 16, kInfinity) ? 2u : 0u) << (2 * k);
      }
      // Lanes 4q..4q+3 hold the four bytes of one 32-bit word of the mask.
      uint32_t word = positive << (8 * (lane % 4));
      word |= __shfl_xor_sync(0xFFFFFFFFu, word, 1);
      word |= __shfl_xor_sync(0xFFFFFFFFu, word, 2);
      if (r < row_end && m0 + r < pr.rows && col_ok) {
        const int64_t first = static_cast<int64_t>(m0 + r) * pr.out + col;
        *reinterpret_cast<uint4*>(y + first) =
            make_uint4(out_pairs[0], out_pairs[1], out_pairs[2], out_pairs[3]);
        if (lane % 4 == 0) bits[first / 32] = word;
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    linear_relu_dropout_kernel(const __grid_constant__ CUtensorMap x_map,
                               const __grid_constant__ CUtensorMap w_map,
                               const T* __restrict__ bias, T* __restrict__ y,
                               uint32_t* __restrict__ bits, Problem pr, RngKey key) {
#if NMT_WGMMA_AVAILABLE
  extern __shared__ unsigned char raw_smem[];
  unsigned char* smem = wgmma::align_to_swizzle(raw_smem);
  T* staging = reinterpret_cast<T*>(smem + kStages * kStageBytes);
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes + kStagingBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      tma::barrier_init(&full[s], 1);
      tma::barrier_init(&empty[s], kConsumerThreads / 32);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();

  if (warp >= 9) {  // the epilogue warps
    const RngKey drawn = with_step_read(key);
    named_arrive(kStagingEmpty, kStagingThreads);  // the staging tile starts empty
    for (int tile = blockIdx.x; tile < pr.tiles; tile += gridDim.x) {
      const int m0 = (tile % pr.m_tiles) * kTileM, n0 = (tile / pr.m_tiles) * kTileN;
      named_sync(kStagingFull, kStagingThreads);
      drain_rows<T, kEpilogueWarps, 4>(staging, y, bits, m0, n0, 0, kEpilogueRows, warp - 9, pr,
                                       drawn);
      if (tile + static_cast<int>(gridDim.x) < pr.tiles)
        named_arrive(kStagingEmpty, kStagingThreads);
    }
    return;
  }
  if (warp == 8) {  // the producer warp: one lane issues every load
    if (lane != 0) return;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < pr.tiles; tile += gridDim.x) {
      const int m0 = (tile % pr.m_tiles) * kTileM, n0 = (tile / pr.m_tiles) * kTileN;
      for (int kb = 0; kb < pr.k_blocks; ++kb) {
        tma::wait(&empty[stage], phase ^ 1);
        unsigned char* a = smem + stage * kStageBytes;
        tma::arrive_expect_bytes(&full[stage], kStageBytes);
        tma::load_2d(a, &x_map, kb * kTileK, m0, &full[stage]);
        tma::load_2d(a + kABytes, &w_map, kb * kTileK, n0, &full[stage]);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  const int group = warp / 4;  // rows 64 * group .. of the tile
  const RngKey drawn = with_step_read(key);
  float d[128];
  int stage = 0;
  uint32_t phase = 0;
  for (int tile = blockIdx.x; tile < pr.tiles; tile += gridDim.x) {
    const int m0 = (tile % pr.m_tiles) * kTileM, n0 = (tile / pr.m_tiles) * kTileN;
    // k-block 0, peeled: its first product writes the accumulators (mma_n256_first), so the
    // previous tile's are dead through the drain above it.
    tma::wait(&full[stage], phase);
    {
      const unsigned char* a = smem + stage * kStageBytes + group * (64 * kTileK * 2);
      const unsigned char* b = smem + stage * kStageBytes + kABytes;
      wgmma::fence();
      wgmma::mma_n256_first<T>(d, wgmma::desc_k_major(a, 0), wgmma::desc_k_major(b, 0));
#pragma unroll
      for (int s = 1; s < kTileK / 16; ++s)
        wgmma::mma_n256<T>(d, wgmma::desc_k_major(a, s), wgmma::desc_k_major(b, s), true);
      wgmma::commit();
    }
    int previous = stage;
    if (++stage == kStages) stage = 0, phase ^= 1;
    for (int kb = 1; kb < pr.k_blocks; ++kb) {
      tma::wait(&full[stage], phase);
      const unsigned char* a = smem + stage * kStageBytes + group * (64 * kTileK * 2);
      const unsigned char* b = smem + stage * kStageBytes + kABytes;
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < kTileK / 16; ++s)
        wgmma::mma_n256<T>(d, wgmma::desc_k_major(a, s), wgmma::desc_k_major(b, s), true);
      wgmma::commit();
      wgmma::wait<1>();  // the previous k-block's products are done with their stage
      if (lane == 0) tma::arrive(&empty[previous]);
      previous = stage;
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
    wgmma::wait<0>();
    wgmma::hold(d);
    if (lane == 0) tma::arrive(&empty[previous]);
    named_sync(kStagingEmpty, kStagingThreads);  // the epilogue has read the previous tile
    stage_tile<T>(d, bias, staging, 64 * group + 16 * (warp % 4) + lane / 4, n0, pr.out);
    named_arrive(kStagingFull, kStagingThreads);
    named_sync(kConsumersStaged, kConsumerThreads);  // the consumers drain the rest themselves
    drain_rows<T, kConsumerThreads / 32, 4>(staging, y, bits, m0, n0, kEpilogueRows, kTileM, warp,
                                            pr, drawn);
  }
#else
  (void)bias, (void)y, (void)bits, (void)pr, (void)key;
  __trap();
#endif
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's tensor-map encoder, through the runtime (no link to libcuda), or null.
EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A row-major [outer, inner] 16-bit matrix read in [box_outer, 64] boxes, 128-byte swizzled.
bool make_map(CUtensorMap* map, DType t, const void* base, int64_t inner, int64_t outer,
              int box_outer) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(inner) * 2};
  const cuuint32_t box[2] = {kTileK, static_cast<cuuint32_t>(box_outer)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encoder()(
             map,
             t == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             2, const_cast<void*>(base), dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T>
void launch(const CUtensorMap& x_map, const CUtensorMap& w_map, const Tensor& b, Tensor& y,
            Tensor& bits, const Problem& pr, const RngKey& key, cudaStream_t stream) {
  static const bool configured = [] {
    CUDA_CHECK(cudaFuncSetAttribute(linear_relu_dropout_kernel<T>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kSmemBytes)));
    return true;
  }();
  (void)configured;
  const int grid = std::min(pr.tiles, multiprocessor_count());
  linear_relu_dropout_kernel<T><<<grid, kThreads, kSmemBytes, stream>>>(
      x_map, w_map, static_cast<const T*>(b.data), static_cast<T*>(y.data),
      static_cast<uint32_t*>(bits.data), pr, key);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void set_fused_linear_relu_dropout(bool on) {
  fused_switch.set(on);
}

bool fused_linear_relu_dropout_enabled() {
  return fused_switch.get();
}

bool fused_linear_relu_dropout(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                               const RngKey& key, Tensor& y, Tensor& positive_bits) {
  const int64_t rows = x.dim(0), in = x.dim(1), out = w.dim(0);
  if (x.dtype != DType::bf16 && x.dtype != DType::f16) return false;
  if (b.empty() || in % 8 != 0 || out % 32 != 0 || rows == 0 || in == 0) return false;
  constexpr int64_t kIntLimit = (int64_t{1} << 31) - 256;  // the kernel's int rows, columns, k
  if (rows > kIntLimit / 2 || out > kIntLimit || in > kIntLimit || rows * out / 32 > kIntLimit)
    return false;
  if (!is_aligned16(x.data) || !is_aligned16(w.data) || !is_aligned16(y.data) ||
      reinterpret_cast<uintptr_t>(b.data) % 4 != 0 ||
      reinterpret_cast<uintptr_t>(positive_bits.data) % 4 != 0)
    return false;
  if (!flash::wgmma_kernels_usable() || encoder() == nullptr) return false;
  CUtensorMap x_map, w_map;
  if (!make_map(&x_map, x.dtype, x.data, in, rows, kTileM) ||
      !make_map(&w_map, x.dtype, w.data, in, out, kTileN))
    return false;
  Problem pr;
  pr.rows = static_cast<int>(rows);
  pr.out = static_cast<int>(out);
  pr.k_blocks = static_cast<int>((in + kTileK - 1) / kTileK);
  pr.m_tiles = static_cast<int>((rows + kTileM - 1) / kTileM);
  pr.tiles = pr.m_tiles * static_cast<int>((out + kTileN - 1) / kTileN);
  pr.keep_scale = 1.0f / (1.0f - p);  // apply_dropout's expression
  // dropout_half_uniform(w) = w / 65536 >= p exactly where w >= ceil(p * 65536) (p * 65536 is
  // exact in float).
  pr.threshold = static_cast<uint32_t>(std::ceil(p * 65536.0f));
  cudaStream_t stream = current_stream();
  if (x.dtype == DType::bf16)
    launch<__nv_bfloat16>(x_map, w_map, b, y, positive_bits, pr, key, stream);
  else
    launch<__half>(x_map, w_map, b, y, positive_bits, pr, key, stream);
  return true;
}

void linear_relu_dropout_forward(const Tensor& x, const Tensor& w, const Tensor& b, float p,
                                 const RngKey& key, Tensor& y, Tensor& positive_bits) {
  constexpr const char* op = "linear_relu_dropout_forward";
  detail::require_rank(op, "x", x, 2);
  detail::require_rank(op, "w", w, 2);
  const int64_t rows = x.dim(0), out = w.dim(0);
  check_shape(op, "y", y, {rows, out});
  detail::require_dropout_p(op, p);
  detail::require_mask_bits(op, "positive_bits", positive_bits, rows, out, {{"y", &y}});
  detail::require_on_gpu(op, {{"x", &x}, {"w", &w}, {"y", &y}, {"positive_bits", &positive_bits}});
  if (fused_linear_relu_dropout_enabled() && !b.empty() && b.data != nullptr) {
    check_shape(op, "b", b, {out});
    detail::require_same_dtype(op, "w", w, "x", x);
    detail::require_same_dtype(op, "b", b, "x", x);
    detail::require_same_dtype(op, "y", y, "x", x);
    check_shape(op, "w", w, {out, x.dim(1)});
    if (fused_linear_relu_dropout(x, w, b, p, key, y, positive_bits)) return;
  }
  cuda::linear_relu_forward(x, w, b, y);
  cuda::dropout_forward_positive_bits(y, y, p, key, positive_bits);
}

}  // namespace nmt::cuda
