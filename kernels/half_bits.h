// Tests on the bits of a 16-bit float (bf16 or IEEE fp16) that the CUDA kernels run on packed
// pairs without converting them, shared with the host so that the CPU suite checks them against
// the conversion for every bit pattern.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace nmt {

// The bits of +infinity: every larger magnitude is a NaN.
constexpr uint32_t kBf16InfinityBits = 0x7F80u;
constexpr uint32_t kF16InfinityBits = 0x7C00u;

// Whether the 16-bit float in the low half of `bits` is > 0 (what `to_float(v) > 0.0f` says):
// sign clear, not zero, not a NaN. infinity_bits: kBf16InfinityBits or kF16InfinityBits.
NMT_HOST_DEVICE bool half_bits_positive(uint32_t bits, uint32_t infinity_bits) {
  const uint32_t h = bits & 0xFFFFu;
  return h != 0 && h <= infinity_bits;  // a set sign bit makes h > infinity_bits
}

}  // namespace nmt
