// Host entry of the wgmma self-test kernels (wgmma_products.cu): each product of
// kernels/cuda/wgmma.cuh on one warpgroup, so test_wgmma can compare it with a CPU product.
#pragma once

#include <cstdint>
#include <vector>

namespace nmt::test {

enum class WgmmaForm {
  ss_k_major,       // C = A Bᵀ, A [64][K] and B [64 n][K] both from swizzled smem, K = 128
  rs_k_major,       // C = A Bᵀ, A from registers, B [64 n][64 k] from smem
  rs_transposed_b,  // C = A B, A from registers, B [64 k][64 n] from smem (MN-major)
  ss_transposed,    // C = A B, A stored [64 k][64 m] and B [64 k][64 n], both MN-major in smem
};

// a: [64, k] bf16 bits (for ss_transposed its transpose, [k, 64]), b: as the form says (bf16 bits);
// returns C [64, 64] f32. Throws if the GPU or its sm_90a kernels are missing.
std::vector<float> run_wgmma_product(WgmmaForm form, const std::vector<uint16_t>& a,
                                     const std::vector<uint16_t>& b, int k);

// Whether the GPU runs the library's wgmma kernels (flash::wgmma_kernels_usable(): compute 9.0 and
// an sm_90a build, as this test's own kernels are).
bool wgmma_runnable();

}  // namespace nmt::test
