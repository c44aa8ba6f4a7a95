// Device helpers shared by the CUDA kernels: fp32 conversion of the activation dtypes, cp.async
// copies into shared memory, a one-instruction 2^x, 16-byte packs, deterministic warp and block
// reductions, and the host-side dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/stream.h"
#include "kernels/op_checks.h"
#include "kernels/tensor.h"

namespace nmt::cuda {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Two values rounded to T and packed into 4 bytes, the low half first (an MMA operand register).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// The shared-window address of a pointer into shared memory (what ldmatrix, cp.async and wgmma
// descriptors take).
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global memory into shared memory without waiting (cp.async; complete after
// cp.async.wait_group); src-size 0 (valid false) writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  cp_async16(shared_address(smem), gmem, valid);
}
// Closes this thread's cp.async copies issued since the last commit into one group.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N of this thread's committed groups are in flight; their writes are then
// visible to this thread (to the block after a barrier).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 2^x by the special-function unit (ex2.approx, results below 2^-126 flushed to zero): one
// instruction where exp2f adds the denormal handling.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// N elements loaded or stored with one instruction (N * sizeof(T) = 16 gives the 128-bit access).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements per 16-byte access.
template <typename T>
constexpr int kPackWidth = static_cast<int>(16 / sizeof(T));

// Stores a 16-byte pack with one 128-bit instruction. A pack whose elements were computed one by
// one may otherwise be stored in 4- or 2-byte pieces (nvcc split the bias-gradient tails' dx
// stores into 4 x STG.E each, session 12), each request then filling a quarter of its sectors
// and L2 merging the partial writes (a uint4 copy of the pack was split the same way); the PTX
// vector store keeps one STG.128. `at` must be a 16-byte aligned global address.
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* at, const Pack<T, N>& pack) {
  if constexpr (sizeof(Pack<T, N>) == 16) {
    uint32_t w[4];
    memcpy(w, &pack, sizeof(w));
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(__cvta_generic_to_global(at)),
                 "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  } else {
    *reinterpret_cast<Pack<T, N>*>(at) = pack;
  }
}

// Element i of a pack in f32, the value to_float gives. For bf16 (f32's upper half) the element's
// 32-bit word shifted or masked into place, not cvt.f32.bf16: with the conversion instruction
// ptxas spilled the bf16 LayerNorm backward row kernels at their register bounds (the f16 ones,
// the same PTX with cvt.f32.f16, fit), with integer operations they fit as the f16 ones do.
template <typename T, int VEC>
__device__ __forceinline__ float pack_element(const Pack<T, VEC>& pack, int i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && VEC % 2 == 0) {
    uint32_t word;
    memcpy(&word, &pack.v[i & ~1], sizeof(word));
    return __uint_as_float(i % 2 == 0 ? word << 16 : word & 0xffff0000u);
  } else {
    return to_float(pack.v[i]);
  }
}

// Blocks of `kernel` that fit on one SM at once (at least 1).
template <typename Kernel>
int resident_blocks_per_sm(Kernel kernel, int threads, size_t shared_bytes) {
  int blocks = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, shared_bytes));
  return blocks > 1 ? blocks : 1;
}

// Butterfly sums: a + b == b + a exactly, so every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block, returned to every thread, in a fixed order. blockDim.x must be a multiple
// of 32; `shared` holds 32 floats. Ends with a barrier, so `shared` may be reused right after.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

inline bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) % 16) == 0;
}

inline unsigned blocks_for(int64_t work, int64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<float | __nv_bfloat16 | __half>{}) for a float dtype; throws for another.
template <typename F>
void dispatch_float_dtype(DType dtype, const char* op, const char* name, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(TypeTag<float>{});
      return;
    case DType::bf16:
      f(TypeTag<__nv_bfloat16>{});
      return;
    case DType::f16:
      f(TypeTag<__half>{});
      return;
    default:
      break;
  }
  throw std::invalid_argument(std::string(op) + ": " + name + " must be f32, bf16 or f16, got " +
                              dtype_name(dtype));
}

}  // namespace nmt::cuda
