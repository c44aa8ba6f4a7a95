// Dropout masks drawn eight elements per Philox call, eight calls side by side so the compiler can
// run the rounds in vector registers (dropout_uniform draws one call per element).
#include "kernels/cpu/dropout_mask.h"

#include <algorithm>

#include "kernels/cpu/vectorize.h"

namespace nmt::cpu {
namespace {

constexpr int kLanes = 8;  // Philox blocks computed together: 64 elements

// bits[4 * lane + word] = word `word` of the Philox-4x32-10 output for block first_block + lane,
// with the counter and key words of philox_block(): the rounds of philox4x32() (kernels/philox.h)
// written over arrays of lanes, so each statement vectorises.
NMT_CPU_CLONES void philox_lanes(const RngKey& key, uint64_t first_block,
                                 uint32_t bits[4 * kLanes]) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    const uint64_t block = first_block + static_cast<uint64_t>(lane);
    c0[lane] = static_cast<uint32_t>(block);
    c1[lane] = static_cast<uint32_t>(block >> 32);
    c2[lane] = key.tensor_id ^ static_cast<uint32_t>(key.step >> 32) * 0x9E3779B9u;
    c3[lane] = static_cast<uint32_t>(key.step);
  }
  uint32_t k0 = static_cast<uint32_t>(key.seed), k1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int lane = 0; lane < kLanes; ++lane) {
      const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0[lane];
      const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2[lane];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[lane] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[lane] ^ k1;
      c0[lane] = n0;
      c1[lane] = static_cast<uint32_t>(p1);
      c2[lane] = n2;
      c3[lane] = static_cast<uint32_t>(p0);
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    bits[4 * lane] = c0[lane];
    bits[4 * lane + 1] = c1[lane];
    bits[4 * lane + 2] = c2[lane];
    bits[4 * lane + 3] = c3[lane];
  }
}

}  // namespace

void dropout_scales(const RngKey& key, uint64_t first, int64_t count, float p, float* scales) {
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t end = first + static_cast<uint64_t>(count);
  // Element e is half e % 2 of word (e / 2) % 4 of block e / 8, as in dropout_uniform(key, e):
  // one group of kLanes blocks covers elements [8 * first_block, 8 * first_block + 64), and
  // element j of the group is half j % 2 of bits[j / 2].
  constexpr int kE = kDropoutBlockElements;
  for (uint64_t element = first; element < end;) {
    const uint64_t first_block = element / kE;
    uint32_t bits[4 * kLanes];
    philox_lanes(key, first_block, bits);
    const uint64_t group_begin = kE * first_block;
    const uint64_t group_end = std::min(end, group_begin + kE * kLanes);
    for (; element < group_end; ++element) {
      const uint64_t j = element - group_begin;
      const float uniform = dropout_half_uniform(bits[j / 2], static_cast<int>(j % 2));
      scales[element - first] = uniform >= p ? keep_scale : 0.0f;
    }
  }
}

}  // namespace nmt::cpu
