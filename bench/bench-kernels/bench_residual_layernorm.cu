// bench-kernels' post-norm LayerNorm tail rows (bench_residual_layernorm.h).
#include <cuda_runtime.h>

#include <string>

#include "bench/bench-kernels/bench_residual_layernorm.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/layernorm.h"

namespace nmt::bench {
namespace {

constexpr float kDropout = 0.1f;
constexpr float kEps = 1e-5f;

// The sublayer's forward tail: normed = x + dropout(f_out), out = LN(normed).
void bench_forward(KernelTimer& timer, ReportRow report, int64_t rows, int64_t d) {
  DeviceTensor residual({rows, d}, DType::bf16), branch({rows, d}, DType::bf16),
      sum({rows, d}, DType::bf16), y({rows, d}, DType::bf16), gamma({d}, DType::bf16),
      beta({d}, DType::bf16), mean({rows}, DType::f32), rstd({rows}, DType::f32);
  fill_uniform(residual.view, -2, 2, 61);
  fill_uniform(branch.view, -1, 1, 62);
  fill_uniform(gamma.view, 0.5f, 1.5f, 63);
  fill_uniform(beta.view, -0.5f, 0.5f, 64);
  const RngKey key{5, 6, 7};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(d);
  const double bytes = 4.0 * static_cast<double>(rows * d) * 2;
  double ms = timer.median_ms([&] {
    cuda::dropout_residual_add(residual.view, branch.view, sum.view, kDropout, key);
    cuda::layernorm_forward(sum.view, gamma.view, beta.view, y.view, mean.view, rstd.view, kEps);
  });
  report("dropout_residual_add + layernorm_forward bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  ms = timer.median_ms([&] {
    cuda::dropout_residual_layernorm_forward(residual.view, branch.view, sum.view, kDropout, key,
                                             gamma.view, beta.view, y.view, mean.view, rstd.view,
                                             kEps);
  });
  report("dropout_residual_layernorm_forward bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
}

}  // namespace

void bench_residual_layernorm(KernelTimer& timer, ReportRow report) {
  for (int64_t d : {512, 1024}) bench_forward(timer, report, 8192, d);
}

}  // namespace nmt::bench
