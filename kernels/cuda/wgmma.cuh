// Hopper warpgroup MMA (wgmma.mma_async, sm_90a) for the fused attention kernels: 128-byte
// swizzled shared-memory blocks, their matrix descriptors, and m64n64k16 products with fp32
// accumulators in the mma.sync fragment layout the attention code already uses.
//
// Operand blocks: a [64 rows][64 cols] 16-bit block, 128 bytes a row, 8 KB, based on a 1024-byte
// boundary; 16-byte chunk c of row r sits at chunk c ^ (r % 8) of that row (the hardware's 128B
// swizzle). A [rows][D] tile is D / 64 such blocks side by side (block b holds columns 64b..).
//
// Accumulators: the warpgroup's 4 warps own rows 16w..16w+15 of the 64; for each 8-column chunk
// j, d[j][0..3] holds (row g, cols 8j + 2t4, +1) and (row g + 8, same cols), lane = 4g + t4, the
// mma.sync m16n8 C layout. A register A operand of a k16 step is the mma.sync m16n8k16 A fragment
// of the warp's 16 rows, so two neighbouring accumulator chunks form it without shuffles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace nmt::cuda::wgmma {

constexpr int kBlockRows = 64;
constexpr int kBlockCols = 64;
constexpr int kBlockBytes = kBlockRows * kBlockCols * 2;

// True where the kernels below were compiled for sm_90a; elsewhere they trap.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NMT_WGMMA_AVAILABLE 1
#else
#define NMT_WGMMA_AVAILABLE 0
#endif

// Dynamic shared memory rounded up to the 1024-byte boundary the swizzled blocks need (launches
// ask for 1024 bytes more than they use).
__device__ __forceinline__ unsigned char* align_to_swizzle(unsigned char* raw) {
  const uint32_t address = shared_address(raw);
  return raw + ((1024u - (address & 1023u)) & 1023u);
}

// Element offset of (row, col) inside one swizzled block.
__device__ __forceinline__ int swizzled_offset(int row, int col) {
  return row * kBlockCols + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

__device__ __forceinline__ uint64_t descriptor(uint32_t smem_address) {
  // start >> 4 in bits 0-13; both byte offsets 1024 >> 4: the stride between 8-row groups, and
  // (unused for a single 64-column block) the stride between blocks along MN; 128B swizzle.
  constexpr uint64_t kOffsets = (uint64_t{1024 >> 4} << 16) | (uint64_t{1024 >> 4} << 32);
  return (static_cast<uint64_t>((smem_address & 0x3FFFF) >> 4)) | kOffsets | (uint64_t{1} << 62);
}

// Operand whose K runs along a row (Q, K as A or B of q·kᵀ): k16 step s starts 32 bytes in.
__device__ __forceinline__ uint64_t desc_k_major(const void* block, int k_step) {
  return descriptor(shared_address(block) + 32 * k_step);
}
// Operand whose K runs down the rows (V, dO, Q, K as the B of p·v, pᵀ·dO, ...): k16 step s starts
// 16 rows (2048 bytes) in; use with the transposed-B products.
__device__ __forceinline__ uint64_t desc_mn_major(const void* block, int k_step) {
  return descriptor(shared_address(block) + 2048 * k_step);
}

// The same for a [64][D] tile of D / 64 blocks side by side: K along the rows, k16 step `step`
// counted across the blocks; or K down the rows, in the block of columns 64 * column_block.
template <typename T>
__device__ __forceinline__ uint64_t desc_k_major_tile(const T* tile, int step) {
  return desc_k_major(tile + (step / 4) * kBlockRows * kBlockCols, step % 4);
}
template <typename T>
__device__ __forceinline__ uint64_t desc_mn_major_tile(const T* tile, int column_block, int step) {
  return desc_mn_major(tile + column_block * kBlockRows * kBlockCols, step);
}

__device__ __forceinline__ void fence() {
#if NMT_WGMMA_AVAILABLE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if NMT_WGMMA_AVAILABLE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wait() {
#if NMT_WGMMA_AVAILABLE
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Makes this thread's generic-proxy shared-memory writes (st.shared, cp.async) visible to wgmma;
// a barrier must follow before another thread's wgmma reads them.
__device__ __forceinline__ void fence_async_proxy() {
#if NMT_WGMMA_AVAILABLE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads or writes across an asynchronous product.
__device__ __forceinline__ void hold(float (&d)[8][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

template <typename T>
struct TypeName;
template <>
struct TypeName<__nv_bfloat16> {
  static constexpr bool is_bf16 = true;
};
template <>
struct TypeName<__half> {
  static constexpr bool is_bf16 = false;
};

#define NMT_WGMMA_D32                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define NMT_WGMMA_D_OPERANDS(d)                                                                 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),     \
      "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
      "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
      "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
      "+f"(d[7][2]), "+f"(d[7][3])

// d (64x64) = (accumulate ? d : 0) + a (64x16) * b (16x64), both from smem: a stored [m][k]
// (K-major, desc_k_major) or with kTransposedA [k][m] (MN-major, desc_mn_major); b stored [n][k]
// (K-major) or with kTransposedB [k][n] (MN-major). Asynchronous: fence() before, commit() and
// wait<>() after.
template <typename T, bool kTransposedA = false, bool kTransposedB = false>
__device__ __forceinline__ void mma_ss(float (&d)[8][4], uint64_t a, uint64_t b, bool accumulate) {
#if NMT_WGMMA_AVAILABLE
  if constexpr (TypeName<T>::is_bf16)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NMT_WGMMA_D32
        ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : NMT_WGMMA_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposedA ? 1 : 0),
          "n"(kTransposedB ? 1 : 0));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " NMT_WGMMA_D32
        ", %32, %33, p, 1, 1, %35, %36;\n}\n"
        : NMT_WGMMA_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kTransposedA ? 1 : 0),
          "n"(kTransposedB ? 1 : 0));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

// d (64x64) = (accumulate ? d : 0) + a (64x16 in registers) * b, where b (16x64) is an smem block
// stored [k][n] (MN-major) when kTransposedB, else [n][k] (K-major).
// The hardware reads `a` asynchronously: keep other work out of the span between this call and
// the wait<>() that completes it, or ptxas (CUDA 13.0) may give the a registers to other values
// (seen: dS reusing held Q fragments, wrong dQ); products with both operands in shared memory
// have no such hazard.
template <typename T, bool kTransposedB>
__device__ __forceinline__ void mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate) {
#if NMT_WGMMA_AVAILABLE
  if constexpr (TypeName<T>::is_bf16)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " NMT_WGMMA_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : NMT_WGMMA_D_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
          "n"(kTransposedB ? 1 : 0));
  else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " NMT_WGMMA_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : NMT_WGMMA_D_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(static_cast<int>(accumulate)),
          "n"(kTransposedB ? 1 : 0));
#else
  (void)d, (void)a, (void)b, (void)accumulate;
  __trap();
#endif
}

#undef NMT_WGMMA_D32
#undef NMT_WGMMA_D_OPERANDS

// Copies the rows of a [64, D] tile that row_valid(row) picks (global rows `stride` elements
// apart, 16-byte aligned) into D / 64 swizzled blocks with cp.async and zeroes the others;
// kThreads threads, this one `thread`, each a fixed set of chunks (the trip count known at compile
// time). Complete after cp.async.wait, fence_async_proxy and a barrier.
template <typename T, int D, int kThreads, typename RowValid>
__device__ __forceinline__ void load_swizzled_rows(T* blocks, const T* gmem, int64_t stride,
                                                   RowValid&& row_valid, int thread) {
  constexpr int kChunksPerRow = D / 8, kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && kBlockRows % kRowsPerPass == 0);
  const int row0 = thread / kChunksPerRow, col = (thread % kChunksPerRow) * 8;
  T* column = blocks + (col / kBlockCols) * (kBlockRows * kBlockCols);
#pragma unroll
  for (int i = 0; i < kBlockRows / kRowsPerPass; ++i) {
    const int row = row0 + i * kRowsPerPass;
    const bool valid = row_valid(row);
    cp_async16(column + swizzled_offset(row, col % kBlockCols),
               valid ? gmem + row * stride + col : gmem, valid);
  }
}

// The rows [0, valid_rows).
template <typename T, int D, int kThreads>
__device__ __forceinline__ void load_swizzled(T* blocks, const T* gmem, int64_t stride,
                                              int valid_rows, int thread) {
  load_swizzled_rows<T, D, kThreads>(
      blocks, gmem, stride, [valid_rows](int row) { return row < valid_rows; }, thread);
}

// Accumulator chunks acc[j] (columns 8j.., times factor) of the calling warp's 16 rows (16w + g,
// + 8) into swizzled blocks, as T. The caller makes sure nothing still reads those rows.
template <typename T, int kChunks>
__device__ __forceinline__ void stage_rows(T* blocks, const float (&acc)[kChunks][4], float factor,
                                           int warp, int lane) {
  const int row = warp * 16 + lane / 4, t4 = lane % 4;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int col = 8 * j + 2 * t4;
    T* block = blocks + (col / kBlockCols) * (kBlockRows * kBlockCols);
    *reinterpret_cast<uint32_t*>(block + swizzled_offset(row, col % kBlockCols)) =
        pack2<T>(acc[j][0] * factor, acc[j][1] * factor);
    *reinterpret_cast<uint32_t*>(block + swizzled_offset(row + 8, col % kBlockCols)) =
        pack2<T>(acc[j][2] * factor, acc[j][3] * factor);
  }
}

// Rows [16w, 16w + 16) ∩ [0, rows) of swizzled blocks (D columns) to global rows `stride`
// elements apart (gmem is row 0, 16-byte aligned), 16 bytes a lane; one warp, after __syncwarp.
template <typename T, int D>
__device__ __forceinline__ void store_rows(T* gmem, int64_t stride, const T* blocks, int rows,
                                           int warp, int lane) {
  constexpr int kChunksPerRow = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunksPerRow / 32; ++i) {
    const int c = lane + 32 * i;
    const int row = warp * 16 + c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    if (row < rows)
      *reinterpret_cast<uint4*>(gmem + row * stride + col) =
          *reinterpret_cast<const uint4*>(blocks + (col / kBlockCols) * (kBlockRows * kBlockCols) +
                                          swizzled_offset(row, col % kBlockCols));
  }
}

}  // namespace nmt::cuda::wgmma
