// bench-kernels' LayerNorm backward and LayerNorm tail rows (bench_residual_layernorm.h).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "bench/bench-kernels/bench_residual_layernorm.h"
#include "kernels/cuda/bias_grad_tails.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/layernorm.h"

namespace nmt::bench {
namespace {

constexpr float kDropout = 0.1f;
constexpr float kEps = 1e-5f;

// The keep mask of (kDropout, key) over [rows, d] as the forward stores it for the backward
// (kernels/philox.h), made by one forward call on scratch tensors.
void store_mask(const Tensor& keep_bits, int64_t rows, int64_t d, const RngKey& key) {
  DeviceTensor residual({rows, d}, DType::bf16), branch({rows, d}, DType::bf16),
      sum({rows, d}, DType::bf16), y({rows, d}, DType::bf16), gamma({d}, DType::bf16),
      beta({d}, DType::bf16), mean({rows}, DType::f32), rstd({rows}, DType::f32);
  if (!cuda::dropout_residual_layernorm_forward(residual.view, branch.view, sum.view, kDropout, key,
                                                gamma.view, beta.view, y.view, mean.view, rstd.view,
                                                kEps, keep_bits))
    throw std::logic_error("bench: the forward stored no keep mask at " + std::to_string(rows) +
                           "x" + std::to_string(d));
}

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
  // Storing the keep mask for the backward (one bit an element more to write).
  DeviceTensor keep_bits({dropout_keep_bits_words(rows, d)}, DType::i32);
  ms = timer.median_ms([&] {
    cuda::dropout_residual_layernorm_forward(residual.view, branch.view, sum.view, kDropout, key,
                                             gamma.view, beta.view, y.view, mean.view, rstd.view,
                                             kEps, keep_bits.view);
  });
  report("dropout_residual_layernorm_forward bf16, keep bits", shape, ms, gb_per_s(bytes, ms),
         "GB/s");
}

// The tensors of a LayerNorm backward tail over [rows, d] bf16: dy, x and the statistics filled
// from consecutive seeds from `seed` (dx too, between x and gamma, where `fill_dx`).
struct BackwardTensors {
  DeviceTensor dy, x, dx, d_branch, gamma, mean, rstd, d_gamma, d_beta, d_branch_bias;
  BackwardTensors(int64_t rows, int64_t d, uint32_t seed, bool fill_dx)
      : dy({rows, d}, DType::bf16),
        x({rows, d}, DType::bf16),
        dx({rows, d}, DType::bf16),
        d_branch({rows, d}, DType::bf16),
        gamma({d}, DType::bf16),
        mean({rows}, DType::f32),
        rstd({rows}, DType::f32),
        d_gamma({d}, DType::f32),
        d_beta({d}, DType::f32),
        d_branch_bias({d}, DType::f32) {
    fill_uniform(dy.view, -1, 1, seed++);
    fill_uniform(x.view, -2, 2, seed++);
    if (fill_dx) fill_uniform(dx.view, -1, 1, seed++);
    fill_uniform(gamma.view, 0.5f, 1.5f, seed++);
    fill_uniform(mean.view, -0.1f, 0.1f, seed++);
    fill_uniform(rstd.view, 0.5f, 1.5f, seed++);
  }
};

// The post-norm dropout tail fused into the LayerNorm backward, drawing its mask and reading the
// forward's saved one (one bit an element more to read, no Philox draws); GB/s of `bytes`.
void bench_dropout_bias_tail(KernelTimer& timer, ReportRow report, BackwardTensors& t,
                             const RngKey& key, int64_t rows, int64_t d, const std::string& shape,
                             double bytes) {
  double ms = timer.median_ms([&] {
    cuda::layernorm_backward_dropout_bias(t.dy.view, t.x.view, t.gamma.view, t.mean.view,
                                          t.rstd.view, t.dx.view, t.d_gamma.view, t.d_beta.view,
                                          t.d_branch.view, kDropout, key, t.d_branch_bias.view);
  });
  report("layernorm_backward_dropout_bias bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  DeviceTensor keep_bits({dropout_keep_bits_words(rows, d)}, DType::i32);
  store_mask(keep_bits.view, rows, d, key);
  ms = timer.median_ms([&] {
    cuda::layernorm_backward_dropout_bias(
        t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view, t.dx.view, t.d_gamma.view,
        t.d_beta.view, t.d_branch.view, kDropout, key, t.d_branch_bias.view, keep_bits.view);
  });
  report("layernorm_backward_dropout_bias bf16, keep bits", shape, ms, gb_per_s(bytes, ms), "GB/s");
}

// The sublayer's backward tail: d_x = LN'(d_out), d_f = dropout'(d_x) and f's output bias
// gradient from d_f.
void bench_backward(KernelTimer& timer, ReportRow report, int64_t rows, int64_t d) {
  BackwardTensors t(rows, d, 65, /*fill_dx=*/false);
  const RngKey key{5, 6, 8};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(d);
  const double bytes = 4.0 * static_cast<double>(rows * d) * 2;
  const double ms = timer.median_ms([&] {
    cuda::layernorm_backward(t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view, t.dx.view,
                             t.d_gamma.view, t.d_beta.view);
    cuda::dropout_backward_bias(t.dx.view, t.d_branch.view, kDropout, key, t.d_branch_bias.view);
  });
  report("layernorm_backward + dropout_backward_bias bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  bench_dropout_bias_tail(timer, report, t, key, rows, d, shape, bytes);
}

// The pre-norm sublayer's backward boundary: d_x = d_x + LN'(d_normed) in place over the residual
// gradient, d_f = dropout'(d_x) and f's output bias gradient from d_f. The residual's values grow
// by the input gradient each run, which leaves the timing alone.
void bench_backward_add(KernelTimer& timer, ReportRow report, int64_t rows, int64_t d) {
  BackwardTensors t(rows, d, 76, /*fill_dx=*/true);
  const RngKey key{5, 6, 10};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(d);
  // The fused op's traffic: read dy, x and the residual, write dx and d_branch.
  const double bytes = 5.0 * static_cast<double>(rows * d) * 2;
  double ms = timer.median_ms([&] {
    cuda::layernorm_backward_add(t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view,
                                 t.dx.view, t.dx.view, t.d_gamma.view, t.d_beta.view);
    cuda::dropout_backward_bias(t.dx.view, t.d_branch.view, kDropout, key, t.d_branch_bias.view);
  });
  report("layernorm_backward_add + dropout_backward_bias bf16", shape, ms, gb_per_s(bytes, ms),
         "GB/s");
  ms = timer.median_ms([&] {
    cuda::layernorm_backward_add_dropout_bias(
        t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view, t.dx.view, t.dx.view,
        t.d_gamma.view, t.d_beta.view, t.d_branch.view, kDropout, key, t.d_branch_bias.view);
  });
  report("layernorm_backward_add_dropout_bias bf16", shape, ms, gb_per_s(bytes, ms), "GB/s");
  DeviceTensor keep_bits({dropout_keep_bits_words(rows, d)}, DType::i32);
  store_mask(keep_bits.view, rows, d, key);
  ms = timer.median_ms([&] {
    cuda::layernorm_backward_add_dropout_bias(t.dy.view, t.x.view, t.gamma.view, t.mean.view,
                                              t.rstd.view, t.dx.view, t.dx.view, t.d_gamma.view,
                                              t.d_beta.view, t.d_branch.view, kDropout, key,
                                              t.d_branch_bias.view, keep_bits.view);
  });
  report("layernorm_backward_add_dropout_bias bf16, keep bits", shape, ms, gb_per_s(bytes, ms),
         "GB/s");
}

// The three backward ops of one register-path kernel (layernorm_backward.cu), each alone: the
// plain backward (read dy and x, write dx), the pre-norm residual tail (also read the residual, dx
// in place over it) and the post-norm dropout tail (also write d_branch). GB/s of those bytes.
void bench_backward_tails(KernelTimer& timer, ReportRow report, int64_t rows, int64_t d) {
  BackwardTensors t(rows, d, 70, /*fill_dx=*/true);
  const RngKey key{5, 6, 9};
  const std::string shape = std::to_string(rows) + "x" + std::to_string(d);
  const double pass = static_cast<double>(rows * d) * 2;  // one [rows, d] bf16 tensor
  double ms = timer.median_ms([&] {
    cuda::layernorm_backward(t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view, t.dx.view,
                             t.d_gamma.view, t.d_beta.view);
  });
  report("layernorm_backward bf16", shape, ms, gb_per_s(3 * pass, ms), "GB/s");
  // dx is the residual (in place, as Sublayer::backward's pre-norm branch runs it); its values
  // grow by the input gradient each run, which leaves the timing alone.
  ms = timer.median_ms([&] {
    cuda::layernorm_backward_add(t.dy.view, t.x.view, t.gamma.view, t.mean.view, t.rstd.view,
                                 t.dx.view, t.dx.view, t.d_gamma.view, t.d_beta.view);
  });
  report("layernorm_backward_add bf16", shape, ms, gb_per_s(4 * pass, ms), "GB/s");
  bench_dropout_bias_tail(timer, report, t, key, rows, d, shape, 4 * pass);
}

}  // namespace

void bench_layernorm_backward(KernelTimer& timer, ReportRow report) {
  for (int64_t d : {512, 1024}) bench_backward_tails(timer, report, 8192, d);
}

void bench_residual_layernorm(KernelTimer& timer, ReportRow report) {
  for (int64_t d : {512, 1024}) bench_forward(timer, report, 8192, d);
  for (int64_t d : {512, 1024}) bench_backward(timer, report, 8192, d);
  for (int64_t d : {512, 1024}) bench_backward_add(timer, report, 8192, d);
}

}  // namespace nmt::bench
