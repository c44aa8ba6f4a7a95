// bench-kernels' wgrad-batch entry (bench_wgrad_batch.h): linear_weight_grads over a batch of
// dW += dyᵀ x products (one cuBLASLt pointer-array launch) against one call a product.
#include "bench/bench-kernels/bench_wgrad_batch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/linear.h"

namespace nmt::bench {
namespace {

constexpr int64_t kRows = 8192;  // 128 sentences x 64 tokens
constexpr int64_t kIn = 512, kOut = 512;
constexpr int kDecoderLayers = 6;

// The largest difference between the two, relative to the largest magnitude of `want` (sums over
// 8192 rows, some near 0: an elementwise relative gap would say little).
double max_scaled_gap(const std::vector<float>& got, const std::vector<float>& want) {
  double gap = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    gap = std::max(gap, std::fabs(double{got[i]} - want[i]));
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  return scale > 0 ? gap / scale : gap;
}

void bench_batch(KernelTimer& timer, int batch) {
  std::vector<std::unique_ptr<DeviceTensor>> xs, dys, batched, single;
  std::vector<WeightGradProduct> as_batch, one_by_one;
  for (int i = 0; i < batch; ++i) {
    xs.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kRows, kIn}, DType::bf16));
    dys.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kRows, kOut}, DType::bf16));
    batched.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kOut, kIn}, DType::f32));
    single.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kOut, kIn}, DType::f32));
    fill_uniform(xs.back()->view, -1, 1, 90 + 2 * i);
    fill_uniform(dys.back()->view, -1, 1, 91 + 2 * i);
    as_batch.push_back({dys.back()->view, xs.back()->view, batched.back()->view});
    one_by_one.push_back({dys.back()->view, xs.back()->view, single.back()->view});
  }
  // The op itself: one pointer-array launch over the batch, or (one product) its dW product.
  auto batch_launch = [&] { linear_weight_grads(as_batch); };
  auto launch_each = [&] {
    for (const WeightGradProduct& p : one_by_one) linear_weight_grads({p});
  };
  // One accumulation from zero each way, then the gap between the results.
  batch_launch();
  launch_each();
  CUDA_CHECK(cudaDeviceSynchronize());
  double gap = 0;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> got(kIn * kOut), want(kIn * kOut);
    CUDA_CHECK(cudaMemcpy(got.data(), batched[i]->view.data, got.size() * 4, cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(want.data(), single[i]->view.data, want.size() * 4, cudaMemcpyDefault));
    gap = std::max(gap, max_scaled_gap(got, want));
  }
  const double separate_ms = timer.median_ms(launch_each);
  const double batch_ms = timer.median_ms(batch_launch);
  const double flop = 2.0 * kRows * kIn * kOut * batch;
  std::printf(
      "wgrad batch %d x %lldx%lldx%lld: one launch %.4f ms (%.4f a product, %.0f TFLOP/s), "
      "one launch each %.4f ms; largest difference %.1e of the largest value\n",
      batch, static_cast<long long>(kIn), static_cast<long long>(kOut),
      static_cast<long long>(kRows), batch_ms, batch_ms / batch, flop / (batch_ms * 1e-3) / 1e12,
      separate_ms, gap);
  if (batch == 3)
    std::printf("  a base step's %d decoder layers, three each: %.4f ms saved\n", kDecoderLayers,
                (separate_ms - batch_ms) * kDecoderLayers);
  std::fflush(stdout);
}

}  // namespace

void bench_wgrad_batch(KernelTimer& timer) {
  try {
    for (int batch : {1, 2, 3, 6}) bench_batch(timer, batch);
  } catch (const std::exception& e) {
    std::printf("wgrad-batch: %s\n", e.what());
  }
  std::fflush(stdout);
}

}  // namespace nmt::bench
