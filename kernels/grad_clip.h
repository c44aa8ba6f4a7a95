// The global-norm gradient clipping of one training step as a record that the optimizer's updates
// read where they run: a GPU step goes from its gradients to its update with no host round trip.
// The host and the device compute the record from one definition, so they give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace nmt {

struct GradClip {
  double grad_norm = 0;  // sqrt(sum of squares of the raw gradients) / divisor
  float scale = 1;       // the factor on each raw gradient: clip_factor(grad_norm, max) / divisor
  int32_t skip = 0;      // 1 when grad_norm is not finite: the updates leave every buffer untouched
};
static_assert(sizeof(GradClip) == 16, "a GradClip record is four i32 words");
constexpr int64_t kGradClipWords = 4;  // i32 words of a buffer that holds one GradClip

// The factor that clips a gradient of norm `norm` to `max_norm`: 1 when max_norm <= 0 or the norm
// is not above it (a NaN norm included; such a step is skipped).
NMT_HOST_DEVICE float clip_factor_of(double norm, float max_norm) {
  if (max_norm <= 0.0f || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / norm);
}

NMT_HOST_DEVICE GradClip grad_clip_of(double sum_of_squares, double divisor, float max_norm) {
  GradClip clip;
  clip.grad_norm = sqrt(sum_of_squares) / divisor;
  // x - x is 0 for every finite x and NaN for an infinity or a NaN.
  clip.skip = clip.grad_norm - clip.grad_norm == 0.0 ? 0 : 1;
  clip.scale = static_cast<float>(clip_factor_of(clip.grad_norm, max_norm) / divisor);
  return clip;
}

}  // namespace nmt
