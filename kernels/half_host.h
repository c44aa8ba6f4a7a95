// Host conversions between fp32 and the 16-bit float formats (bf16, IEEE fp16), round to nearest
// even like the CUDA intrinsics, so host code can read and write GPU activations bit-exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace nmt {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // stay a (quiet) NaN
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00);  // rounds to infinity
  if (a < 6.103515625e-05f) {                                      // subnormal range: 2^-24 steps
    float steps = std::nearbyint(a * 16777216.0f);                 // ties to even (default mode)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(steps));
  }
  uint32_t ua = float_bits(a);
  ua += 0xFFF + ((ua >> 13) & 1);  // round the 13 dropped mantissa bits to nearest even
  uint32_t exponent = (ua >> 23) - 112, mantissa = (ua >> 13) & 0x3FF;
  return static_cast<uint16_t>(sign | (exponent << 10) | mantissa);
}

}  // namespace nmt
