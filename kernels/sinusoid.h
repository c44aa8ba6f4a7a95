// The sinusoidal position encoding of one (position, dim), shared by the CPU reference
// (sinusoid_position in kernels/embedding.h) and the CUDA embedding kernels.
#pragma once

#include <math.h>

#include <cstdint>

#include "kernels/host_device.h"

namespace nmt {

// half = d_model / 2; dims [0, half) hold sin(position * inv_freq_i), dims [half, 2 * half)
// cos(...), inv_freq_i = exp(-i * ln(10000) / max(half - 1, 1)); an odd last dim is 0. In double,
// rounded once to float.
NMT_HOST_DEVICE float sinusoid_value(int64_t position, int64_t dim, int64_t d_model) {
  const int64_t half = d_model / 2;
  if (dim < 0 || dim >= 2 * half) return 0.0f;  // the odd last dim of an odd d_model
  const int64_t i = dim < half ? dim : dim - half;
  // tensor2tensor guards a single frequency (d_model 2 or 3) against 0/0 the same way.
  const double denominator = static_cast<double>(half - 1 > 1 ? half - 1 : 1);
  const double inv_freq = exp(-static_cast<double>(i) * log(10000.0) / denominator);
  const double angle = static_cast<double>(position) * inv_freq;
  return static_cast<float>(dim < half ? sin(angle) : cos(angle));
}

}  // namespace nmt
