// Dropout masks drawn eight elements per Philox call, identical to dropout_keep() in
// kernels/philox.h element by element (test_kernels_cpu pins this).
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace nmt::cpu {

// scales: [count] written: scales[i] = 1 / (1 - p) where dropout_keep(key, first + i, p), else 0.
// Requires 0 <= p < 1.
void dropout_scales(const RngKey& key, uint64_t first, int64_t count, float p, float* scales);

}  // namespace nmt::cpu
