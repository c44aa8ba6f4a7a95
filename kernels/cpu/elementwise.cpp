// CPU reference of the elementwise ops: ReLU, residual add, in-place add/scale, dropout.
#include "kernels/cpu/elementwise.h"

#include <algorithm>

#include "kernels/cpu/dropout_mask.h"

namespace nmt::cpu {
namespace {

// Below this many elements a loop stays on one thread: starting threads costs more than it saves.
constexpr int64_t kParallelElements = 1 << 16;

}  // namespace

void relu_forward(const float* x, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(const float* dy, const float* y, float* dx, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void residual_add(const float* a, const float* b, float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale_inplace(float* y, float s, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

namespace {

// Calls apply(begin, count, scales) over chunks of a multiple of four elements (so no Philox block
// is drawn twice), scales[i] being element begin + i's dropout scale.
template <typename Apply>
void for_dropout_chunks(int64_t n, float p, const RngKey& key, Apply apply) {
  constexpr int64_t kChunk = 1024;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk;
    const int64_t count = std::min(kChunk, n - begin);
    float scales[kChunk];
    dropout_scales(key, static_cast<uint64_t>(begin), count, p, scales);
    apply(begin, count, scales);
  }
}

}  // namespace

void dropout_apply(const float* x, float* y, int64_t n, float p, const RngKey& key) {
  if (p == 0.0f) {
    if (y != x) std::copy(x, x + n, y);
    return;
  }
  for_dropout_chunks(n, p, key, [&](int64_t begin, int64_t count, const float* scales) {
    for (int64_t i = 0; i < count; ++i) y[begin + i] = x[begin + i] * scales[i];
  });
}

void dropout_residual_add(const float* a, const float* b, float* y, int64_t n, float p,
                          const RngKey& key) {
  if (p == 0.0f) return residual_add(a, b, y, n);
  for_dropout_chunks(n, p, key, [&](int64_t begin, int64_t count, const float* scales) {
    for (int64_t i = 0; i < count; ++i) {
      const float dropped = b[begin + i] * scales[i];
      y[begin + i] = a[begin + i] + dropped;
    }
  });
}

void relu_dropout_backward(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const float keep_scale = 1.0f / (1.0f - p);  // dropout_scales' expression
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] * keep_scale : 0.0f;
}

}  // namespace nmt::cpu
