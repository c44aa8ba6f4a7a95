// bench-kernels' fc1 rows (bench_ffn_fc1.h).
#include <string>

#include "bench/bench-kernels/bench_ffn_fc1.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_relu_dropout.h"
#include "kernels/philox.h"

namespace nmt::bench {
namespace {

void bench_shape(KernelTimer& timer, ReportRow report, int64_t rows, int64_t in, int64_t out) {
  DeviceTensor x({rows, in}, DType::bf16), w({out, in}, DType::bf16), b({out}, DType::bf16),
      y({rows, out}, DType::bf16), bits({dropout_keep_bits_words(rows, out)}, DType::i32);
  fill_uniform(x.view, -1, 1, 61);
  fill_uniform(w.view, -0.05f, 0.05f, 62);
  fill_uniform(b.view, -0.05f, 0.05f, 63);
  const RngKey key{3, 4, 5};
  const float p = 0.1f;
  const std::string shape =
      std::to_string(rows) + "x" + std::to_string(out) + "x" + std::to_string(in);
  const double flops = 2.0 * rows * in * out;
  const auto tflops = [flops](double ms) { return flops / (ms * 1e-3) / 1e12; };
  double ms = timer.median_ms([&] { cuda::linear_relu_forward(x.view, w.view, b.view, y.view); });
  report("fc1 cuBLASLt bias+relu alone bf16", shape, ms, tflops(ms), "TFLOP/s");
  ms = timer.median_ms([&] {
    cuda::linear_relu_forward(x.view, w.view, b.view, y.view);
    cuda::dropout_forward_positive_bits(y.view, y.view, p, key, bits.view);
  });
  report("fc1 cuBLASLt + dropout bits bf16 p0.1", shape, ms, tflops(ms), "TFLOP/s");
  bool fused = true;
  ms = timer.median_ms([&] {
    fused = cuda::fused_linear_relu_dropout(x.view, w.view, b.view, p, key, y.view, bits.view);
  });
  if (fused)
    report("fc1 fused (ours) bf16 p0.1", shape, ms, tflops(ms), "TFLOP/s");
  else
    report("fc1 fused (ours): not on this GPU", shape, 0.0, 0.0, "TFLOP/s");
}

}  // namespace

void bench_ffn_fc1(KernelTimer& timer, ReportRow report) {
  bench_shape(timer, report, 8192, 512, 2048);
  bench_shape(timer, report, 16384, 512, 2048);
  bench_shape(timer, report, 8192, 1024, 4096);
}

}  // namespace nmt::bench
