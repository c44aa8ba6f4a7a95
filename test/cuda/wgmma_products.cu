// One-warpgroup kernels exercising each wgmma product form of kernels/cuda/wgmma.cuh (swizzled
// loads, descriptors, register A fragments, accumulator layout), for test_wgmma.cpp.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/flash_attention/launch.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "test/cuda/wgmma_products.h"

namespace nmt::test {
namespace {

using T = __nv_bfloat16;
namespace wgmma = nmt::cuda::wgmma;

// A fragment (mma.sync m16n8k16 layout) of the warp's 16 rows, k columns 16s..16s+15, from a
// row-major [64][k] global matrix.
__device__ void a_fragment(uint32_t (&a)[4], const T* m, int k, int step, int warp, int lane) {
  const int g = lane / 4, t4 = lane % 4, row = warp * 16 + g, col = step * 16 + 2 * t4;
  auto pair = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(m + r * k + c); };
  a[0] = pair(row, col);
  a[1] = pair(row + 8, col);
  a[2] = pair(row, col + 8);
  a[3] = pair(row + 8, col + 8);
}

// One kernel per form: ptxas wants each wgmma.fence in the same straight-line code as the
// products it covers and each commit right behind them; with a runtime branch on the form between
// them (one kernel for all forms) it injected a warpgroup.arrive (C7519) before each form's first
// product and before the dummy product it adds to commit at the join.
template <WgmmaForm kForm>
__global__ void product_kernel(const T* a, const T* b, int k, float* c) {
  __shared__ __align__(1024) T s_a[2 * 64 * 64];
  __shared__ __align__(1024) T s_b[2 * 64 * 64];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  constexpr bool kRegisterA = kForm == WgmmaForm::rs_k_major || kForm == WgmmaForm::rs_transposed_b;
  if constexpr (kForm == WgmmaForm::ss_k_major) {
    wgmma::load_swizzled<T, 128, 128>(s_a, a, 128, 64, tid);
    wgmma::load_swizzled<T, 128, 128>(s_b, b, 128, 64, tid);
  } else {
    wgmma::load_swizzled<T, 64, 128>(s_b, b, 64, 64, tid);
    if constexpr (kForm == WgmmaForm::ss_transposed)
      wgmma::load_swizzled<T, 64, 128>(s_a, a, 64, 64, tid);
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  wgmma::fence_async_proxy();
  __syncthreads();
  float d[8][4] = {};
  uint32_t frag[4][4];
  if constexpr (kRegisterA)
    for (int s = 0; s < 4; ++s) a_fragment(frag[s], a, k, s, warp, lane);
  wgmma::fence();
  if constexpr (kForm == WgmmaForm::ss_k_major) {
#pragma unroll
    for (int s = 0; s < 8; ++s)
      wgmma::mma_ss<T>(d, wgmma::desc_k_major(s_a + (s / 4) * 4096, s % 4),
                       wgmma::desc_k_major(s_b + (s / 4) * 4096, s % 4), s > 0);
  } else if constexpr (kForm == WgmmaForm::rs_k_major) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
      wgmma::mma_rs<T, false>(d, frag[s], wgmma::desc_k_major(s_b, s), s > 0);
  } else if constexpr (kForm == WgmmaForm::rs_transposed_b) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
      wgmma::mma_rs<T, true>(d, frag[s], wgmma::desc_mn_major(s_b, s), s > 0);
  } else {
#pragma unroll
    for (int s = 0; s < 4; ++s)
      wgmma::mma_ss<T, true, true>(d, wgmma::desc_mn_major(s_a, s), wgmma::desc_mn_major(s_b, s),
                                   s > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::hold(d);
  const int g = lane / 4, t4 = lane % 4;
  for (int j = 0; j < 8; ++j)
    for (int e = 0; e < 4; ++e)
      c[(warp * 16 + g + (e / 2) * 8) * 64 + 8 * j + 2 * t4 + (e & 1)] = d[j][e];
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

bool wgmma_runnable() {
  return cuda::flash::wgmma_kernels_usable();
}

std::vector<float> run_wgmma_product(WgmmaForm form, const std::vector<uint16_t>& a,
                                     const std::vector<uint16_t>& b, int k) {
  T *d_a = nullptr, *d_b = nullptr;
  float* d_c = nullptr;
  check(cudaMalloc(&d_a, a.size() * 2), "cudaMalloc");
  check(cudaMalloc(&d_b, b.size() * 2), "cudaMalloc");
  check(cudaMalloc(&d_c, 64 * 64 * 4), "cudaMalloc");
  check(cudaMemcpy(d_a, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "copy a");
  check(cudaMemcpy(d_b, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "copy b");
  switch (form) {
    case WgmmaForm::ss_k_major:
      product_kernel<WgmmaForm::ss_k_major><<<1, 128>>>(d_a, d_b, k, d_c);
      break;
    case WgmmaForm::rs_k_major:
      product_kernel<WgmmaForm::rs_k_major><<<1, 128>>>(d_a, d_b, k, d_c);
      break;
    case WgmmaForm::rs_transposed_b:
      product_kernel<WgmmaForm::rs_transposed_b><<<1, 128>>>(d_a, d_b, k, d_c);
      break;
    case WgmmaForm::ss_transposed:
      product_kernel<WgmmaForm::ss_transposed><<<1, 128>>>(d_a, d_b, k, d_c);
      break;
  }
  check(cudaGetLastError(), "product_kernel launch");
  std::vector<float> c(64 * 64);
  check(cudaMemcpy(c.data(), d_c, c.size() * 4, cudaMemcpyDeviceToHost), "product_kernel");
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
  return c;
}

}  // namespace nmt::test
