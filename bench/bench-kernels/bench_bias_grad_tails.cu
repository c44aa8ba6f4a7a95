// bench-kernels' bias-gradient tail rows (bench_bias_grad_tails.h).
#include <cuda_runtime.h>

#include <string>

#include "bench/bench-kernels/bench_bias_grad_tails.h"
#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/stream.h"

namespace nmt::bench {
namespace {

// The sublayer's tail: dropout's backward of the output gradient, and the output projection's
// bias gradient from it.
void bench_dropout_tail(KernelTimer& timer, ReportRow report, int64_t rows, int64_t cols, float p) {
  DeviceTensor dy({rows, cols}, DType::bf16), dx({rows, cols}, DType::bf16), db({cols}, DType::f32);
  fill_uniform(dy.view, -1, 1, 51);
  const RngKey key{5, 6, 7};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const std::string p_text = p == 0.0f ? " p 0" : " p 0.1";
  const double bytes = 2.0 * static_cast<double>(rows * cols) * 2;
  double ms = timer.median_ms([&] {
    cuda::dropout_backward(dy.view, dx.view, p, key);
    cuda::accumulate_column_sums(dx.view, static_cast<float*>(db.view.data),
                                 cuda::current_stream());
  });
  report("dropout_backward + column_sums bf16" + p_text, shape, ms, gb_per_s(bytes, ms), "GB/s");
  ms = timer.median_ms([&] { cuda::dropout_backward_bias(dy.view, dx.view, p, key, db.view); });
  report("dropout_backward_bias bf16" + p_text, shape, ms, gb_per_s(bytes, ms), "GB/s");
}

// The feed-forward block's tail: ReLU + dropout backward of fc1's output gradient, and fc1's bias
// gradient from it.
void bench_relu_dropout_tail(KernelTimer& timer, ReportRow report, int64_t rows, int64_t cols) {
  DeviceTensor dy({rows, cols}, DType::bf16), y({rows, cols}, DType::bf16),
      dx({rows, cols}, DType::bf16), db({cols}, DType::f32);
  fill_uniform(dy.view, -1, 1, 52);
  fill_uniform(y.view, -1, 1, 53);
  const float p = 0.1f;
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
  const double bytes = 3.0 * static_cast<double>(rows * cols) * 2;
  double ms = timer.median_ms([&] {
    cuda::relu_dropout_backward(dy.view, y.view, dx.view, p);
    cuda::accumulate_column_sums(dx.view, static_cast<float*>(db.view.data),
                                 cuda::current_stream());
  });
  report("relu_dropout_backward + column_sums bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  ms = timer.median_ms(
      [&] { cuda::relu_dropout_backward_bias(dy.view, y.view, dx.view, p, db.view); });
  report("relu_dropout_backward_bias bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  // The feed-forward block's forward dropout, then the tail reading its positive bits, not y.
  DeviceTensor h({rows, cols}, DType::bf16),
      bits({dropout_keep_bits_words(rows, cols)}, DType::i32);
  fill_uniform(h.view, -1, 1, 54);
  const RngKey key{8, 9, 10};
  const double forward_bytes = 2.0 * static_cast<double>(rows * cols) * 2;
  ms = timer.median_ms([&] { cuda::dropout_forward(h.view, y.view, p, key); });
  report("dropout_forward bf16 p 0.1", shape, ms, gb_per_s(forward_bytes, ms), "GB/s");
  ms = timer.median_ms(
      [&] { cuda::dropout_forward_positive_bits(h.view, y.view, p, key, bits.view); });
  report("dropout_forward_positive_bits bf16 p 0.1", shape, ms,
         gb_per_s(forward_bytes + static_cast<double>(rows * cols) / 8, ms), "GB/s");
  const double bits_bytes =
      2.0 * static_cast<double>(rows * cols) * 2 + static_cast<double>(rows * cols) / 8;
  ms = timer.median_ms(
      [&] { cuda::relu_dropout_backward_bias(dy.view, y.view, dx.view, p, db.view, bits.view); });
  report("relu_dropout_backward_bias bf16 from positive bits", shape, ms, gb_per_s(bits_bytes, ms),
         "GB/s");
}

}  // namespace

void bench_bias_grad_tails(KernelTimer& timer, ReportRow report) {
  bench_dropout_tail(timer, report, 8192, 512, 0.1f);
  bench_dropout_tail(timer, report, 8192, 512, 0.0f);
  bench_relu_dropout_tail(timer, report, 8192, 2048);
}

}  // namespace nmt::bench
