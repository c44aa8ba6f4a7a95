// The wgmma building blocks of the attention kernels (kernels/cuda/wgmma.cuh) against a CPU
// product: each operand form on one warpgroup, with small integers so every sum is exact.
#include <cstdint>
#include <cstring>
#include <vector>

#include "test/cuda/wgmma_products.h"
#include "test/support/catch.h"

namespace nmt::test {
namespace {

uint16_t bf16_bits(float x) {  // exact for the small integers used here
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

std::vector<float> small_integers(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int>((seed >> 24) % 7) - 3);
  }
  return v;
}

std::vector<uint16_t> bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits(v[i]);
  return out;
}

// C[m][n] = sum_k A(m, k) * B(k, n) where A(m, k) = a[m * k_total + k], or a[k * 64 + m] when
// a_transposed, and B(k, n) = b[n * k_total + k] (k-major) or b[k * 64 + n].
std::vector<float> reference(const std::vector<float>& a, const std::vector<float>& b, int k,
                             bool a_transposed, bool b_k_major) {
  std::vector<float> c(64 * 64, 0.0f);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n) {
      float sum = 0.0f;
      for (int i = 0; i < k; ++i)
        sum += (a_transposed ? a[i * 64 + m] : a[m * k + i]) *
               (b_k_major ? b[n * k + i] : b[i * 64 + n]);
      c[m * 64 + n] = sum;
    }
  return c;
}

TEST_CASE("wgmma products match the CPU on every operand form", "[cuda]") {
  if (!wgmma_runnable()) {
    WARN("skipped: the GPU is not compute 9.0 or the kernels were not built for sm_90a");
    return;
  }
  struct Form {
    WgmmaForm form;
    int k;
    bool a_transposed, b_k_major;
    const char* name;
  };
  for (const Form& f : {Form{WgmmaForm::ss_k_major, 128, false, true, "ss k-major, K 128"},
                        Form{WgmmaForm::rs_k_major, 64, false, true, "rs k-major"},
                        Form{WgmmaForm::rs_transposed_b, 64, false, false, "rs transposed B"},
                        Form{WgmmaForm::ss_transposed, 64, true, false, "ss transposed A, B"}}) {
    INFO(f.name);
    const std::vector<float> a = small_integers(64 * f.k, 11), b = small_integers(64 * f.k, 23);
    const std::vector<float> got = run_wgmma_product(f.form, bits(a), bits(b), f.k);
    const std::vector<float> want = reference(a, b, f.k, f.a_transposed, f.b_k_major);
    int wrong = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i]) {
        if (first < 0) first = static_cast<int>(i);
        ++wrong;
      }
    INFO("first wrong element " << first << " of " << wrong);
    CHECK(wrong == 0);
  }
}

}  // namespace
}  // namespace nmt::test
