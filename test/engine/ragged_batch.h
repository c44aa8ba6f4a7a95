// The CPU model suites' small batch: three sentences of different lengths on both sides, so
// padding and masks are exercised.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace nmt::test {

inline Batch ragged_batch() {
  std::vector<std::vector<int32_t>> src = {{4, 5, 6, 7, 8}, {9, 4}, {5, 5, 6}};
  std::vector<std::vector<int32_t>> tgt = {{8, 7, 6}, {4, 9, 10, 5}, {6}};
  return make_batch(src, tgt, {0, 1, 2}, 1);
}

}  // namespace nmt::test
