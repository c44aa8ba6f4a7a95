// Hopper's bulk-copy pipeline (sm_90a): shared-memory mbarriers that count arrivals and the bytes
// a tensor-memory-access (TMA) copy delivers, and the 2-D TMA load that fills a 128-byte swizzled
// tile (the layout kernels/cuda/wgmma.cuh's descriptors read) from a tensor map.
//
// Phases: a barrier starts in phase 0. wait(bar, parity) returns once the phase of that parity
// has completed; waiting on parity 1 before anything arrived returns at once (the phase "before"
// phase 0 counts as complete), which is how a producer passes its first round of empty slots.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/cuda/wgmma.cuh"

namespace nmt::cuda::tma {

__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t arrivals) {
#if NMT_WGMMA_AVAILABLE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals)
               : "memory");
#else
  (void)bar, (void)arrivals;
#endif
}

// Makes the initialised barriers visible to the async proxy (TMA); a block barrier follows.
__device__ __forceinline__ void barrier_init_fence() {
#if NMT_WGMMA_AVAILABLE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
#if NMT_WGMMA_AVAILABLE
  const uint32_t address = shared_address(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  (void)bar, (void)parity;
#endif
}

__device__ __forceinline__ void arrive(uint64_t* bar) {
#if NMT_WGMMA_AVAILABLE
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#else
  (void)bar;
#endif
}

// One arrival that also tells the barrier to expect `bytes` more from TMA copies.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if NMT_WGMMA_AVAILABLE
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
#else
  (void)bar, (void)bytes;
#endif
}

// Copies the box at (inner, outer) element coordinates of `map` into `smem` (1024-byte aligned
// for the 128-byte swizzle); `bar` learns of the bytes as they land. Elements outside the tensor
// arrive as zeros and still count their bytes.
__device__ __forceinline__ void load_2d(void* smem, const CUtensorMap* map, int inner, int outer,
                                        uint64_t* bar) {
#if NMT_WGMMA_AVAILABLE
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(shared_address(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(inner), "r"(outer), "r"(shared_address(bar))
      : "memory");
#else
  (void)smem, (void)map, (void)inner, (void)outer, (void)bar;
#endif
}

}  // namespace nmt::cuda::tma
