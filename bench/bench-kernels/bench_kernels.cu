// bench-kernels: times the CUDA ops at Transformer-base sizes (CUDA events, L2 flushed before each
// run, median of N runs) and prints a table; bench/compare_torch.py measures PyTorch the same way.
// Usage: bench-kernels [--runs N] [--verbose]
//                      [--only
//                      attention-fused|column-sums|ffn-fc1|bias-grad-tails|residual-layernorm|
//                              layernorm-backward|cross-entropy|gemm-algos|wgrad|wgrad-batch]
// gemm-algos, wgrad and wgrad-batch run only when named: gemm-algos times every cuBLASLt algorithm
// of each training-step product, wgrad the weight gradients with split-k and beside their dX
// product, wgrad-batch the 512x512 ones as one batched launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench-kernels/bench_bias_grad_tails.h"
#include "bench/bench-kernels/bench_column_sums.h"
#include "bench/bench-kernels/bench_ffn_fc1.h"
#include "bench/bench-kernels/bench_gemm_algos.h"
#include "bench/bench-kernels/bench_residual_layernorm.h"
#include "bench/bench-kernels/bench_timer.h"
#include "bench/bench-kernels/bench_wgrad.h"
#include "bench/bench-kernels/bench_wgrad_batch.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/fused_attention.h"

namespace nmt::bench {
namespace {

struct Result {
  std::string op, shape;
  double ms;
  double rate;
  const char* unit;
};

std::vector<Result> g_results;

void report(const std::string& op, const std::string& shape, double ms, double rate,
            const char* unit) {
  g_results.push_back({op, shape, ms, rate, unit});
  std::printf("%-26s %-24s %10.4f ms %10.1f %s\n", op.c_str(), shape.c_str(), ms, rate, unit);
  std::fflush(stdout);
}

double tflop_per_s(double flops, double ms) {
  return flops / (ms * 1e-3) / 1e12;
}

void bench_layernorm(KernelTimer& timer) {
  const int64_t rows = 16384, d = 512;
  DeviceTensor x({rows, d}, DType::bf16), y({rows, d}, DType::bf16), dy({rows, d}, DType::bf16),
      dx({rows, d}, DType::bf16), gamma({d}, DType::bf16), beta({d}, DType::bf16),
      mean({rows}, DType::f32), rstd({rows}, DType::f32), d_gamma({d}, DType::f32),
      d_beta({d}, DType::f32);
  fill_uniform(x.view, -2, 2, 1);
  fill_uniform(dy.view, -1, 1, 2);
  fill_uniform(gamma.view, 0.5, 1.5, 3);
  fill_uniform(beta.view, -0.5, 0.5, 4);
  fill_uniform(d_gamma.view, 0, 0, 5);
  fill_uniform(d_beta.view, 0, 0, 6);
  const double n = static_cast<double>(rows * d);
  double ms = timer.median_ms([&] {
    cuda::layernorm_forward(x.view, gamma.view, beta.view, y.view, mean.view, rstd.view, 1e-5f);
  });
  report("layernorm_forward bf16", "16384x512", ms,
         gb_per_s(2 * n * 2 + 2 * d * 2 + rows * 8.0, ms), "GB/s");
  ms = timer.median_ms([&] {
    cuda::layernorm_backward(dy.view, x.view, gamma.view, mean.view, rstd.view, dx.view,
                             d_gamma.view, d_beta.view);
  });
  report("layernorm_backward bf16", "16384x512", ms,
         gb_per_s(3 * n * 2 + d * 2 + rows * 8.0 + 4 * d * 4, ms), "GB/s");
}

// The Transformer-base vocabulary (32000) and 32768, on the shared-memory row kernel (the default:
// the plain shape) and on the register kernel (NMT_CROSS_ENTROPY_SMEM=0: "regs" after the shape);
// the rows set the switch themselves, whatever the environment says, and restore it.
void bench_cross_entropy(KernelTimer& timer) {
  const bool was = cuda::cross_entropy_smem();
  for (int64_t vocab : {int64_t{32768}, int64_t{32000}}) {
    const int64_t rows = 8192;
    DeviceTensor logits({rows, vocab}, DType::bf16), grad({rows, vocab}, DType::bf16),
        targets({rows}, DType::i32);
    fill_uniform(logits.view, -8, 8, 7);
    fill_ids(targets.view, static_cast<int32_t>(vocab), 8);
    for (bool smem : {true, false}) {
      cuda::set_cross_entropy_smem(smem);
      const std::string shape = std::to_string(rows) + "x" + std::to_string(vocab) +
                                (cuda::cross_entropy_smem_rows(DType::bf16, vocab) ? "" : " regs");
      const double ms = timer.median_ms([&] {
        cuda::cross_entropy_forward_backward(logits.view, targets.view, -1, 0.1f, 1.0f, grad.view);
      });
      report("cross_entropy fwd+bwd bf16", shape, ms,
             gb_per_s(2.0 * static_cast<double>(rows * vocab) * 2, ms), "GB/s");
    }
  }
  cuda::set_cross_entropy_smem(was);
}

void bench_adam(KernelTimer& timer) {
  const int64_t n = 61000000;
  DeviceTensor param({n}, DType::f32), grad({n}, DType::f32), m({n}, DType::f32),
      v({n}, DType::f32);
  fill_uniform(param.view, -0.1f, 0.1f, 9);
  fill_uniform(grad.view, -0.01f, 0.01f, 10);
  fill_uniform(m.view, -0.001f, 0.001f, 11);
  fill_uniform(v.view, 0.0f, 1e-5f, 12);
  AdamHyper h;
  h.step = 10;
  double ms =
      timer.median_ms([&] { cuda::adam_update(param.view, grad.view, m.view, v.view, h, 1.0f); });
  report("adam_update f32", "61M params", ms, gb_per_s(28.0 * n, ms), "GB/s");
  ms = timer.median_ms([&] { cuda::sum_of_squares(grad.view); });
  report("sum_of_squares f32", "61M", ms, gb_per_s(4.0 * n, ms), "GB/s");
}

void bench_linear(KernelTimer& timer, int64_t rows, int64_t in, int64_t out, bool backward) {
  DeviceTensor x({rows, in}, DType::bf16), w({out, in}, DType::bf16), y({rows, out}, DType::bf16);
  fill_uniform(x.view, -1, 1, 13);
  fill_uniform(w.view, -0.05f, 0.05f, 14);
  const std::string shape =
      std::to_string(rows) + "x" + std::to_string(out) + "x" + std::to_string(in);
  const double flops = 2.0 * rows * in * out;
  Tensor none;
  double ms = timer.median_ms([&] { cuda::linear_forward(x.view, w.view, none, y.view); });
  report("linear_forward bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s");
  if (backward) {  // the feed-forward block's first product: bias + ReLU fused vs separate
    DeviceTensor b({out}, DType::bf16);
    fill_uniform(b.view, -0.05f, 0.05f, 17);
    ms = timer.median_ms([&] { cuda::linear_forward(x.view, w.view, b.view, y.view); });
    report("linear_forward+bias bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s");
    ms = timer.median_ms([&] {
      cuda::linear_forward(x.view, w.view, b.view, y.view);
      cuda::relu_forward(y.view, y.view);
    });
    report("linear+bias, then relu kernel bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s");
    ms = timer.median_ms([&] { cuda::linear_relu_forward(x.view, w.view, b.view, y.view); });
    report("linear_relu_forward epilogue bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s");
  }
  if (!backward) return;
  DeviceTensor dx({rows, in}, DType::bf16), dw({out, in}, DType::f32), db({out}, DType::f32);
  fill_uniform(dw.view, 0, 0, 15);
  fill_uniform(db.view, 0, 0, 16);
  ms = timer.median_ms(
      [&] { cuda::linear_backward(y.view, x.view, w.view, dx.view, dw.view, db.view); });
  report("linear_backward bf16", shape, ms, tflop_per_s(2 * flops, ms), "TFLOP/s");
}

void bench_attention(KernelTimer& timer, bool causal) {
  AttentionShape s;
  s.batch = 128;
  s.q_len = 64;
  s.kv_len = 64;
  s.heads = 8;
  s.head_dim = 64;
  s.causal = causal;
  const int64_t rows = s.batch * s.q_len, width = s.heads * s.head_dim;
  DeviceTensor q({rows, width}, DType::bf16), k({rows, width}, DType::bf16),
      v({rows, width}, DType::bf16), out({rows, width}, DType::bf16),
      d_out({rows, width}, DType::bf16), dq({rows, width}, DType::bf16),
      dk({rows, width}, DType::bf16), dv({rows, width}, DType::bf16),
      probs({s.batch, s.heads, s.q_len, s.kv_len}, DType::f32), lengths({s.batch}, DType::i32);
  fill_uniform(q.view, -1, 1, 17);
  fill_uniform(k.view, -1, 1, 18);
  fill_uniform(v.view, -1, 1, 19);
  fill_uniform(d_out.view, -1, 1, 20);
  std::vector<int32_t> full(s.batch, static_cast<int32_t>(s.kv_len));
  CUDA_CHECK(cudaMemcpy(lengths.view.data, full.data(), full.size() * 4, cudaMemcpyHostToDevice));
  const RngKey key{1, 1, 1};
  const double flops = 4.0 * s.batch * s.heads * s.q_len * s.kv_len * s.head_dim;
  const std::string name = causal ? "attention causal" : "attention";
  double ms = timer.median_ms([&] {
    cuda::attention_forward(q.view, k.view, v.view, lengths.view, out.view, probs.view, s, 0.0f,
                            key);
  });
  report(name + " fwd bf16", "128x8x64x64 d64", ms, tflop_per_s(flops, ms), "TFLOP/s");
  ms = timer.median_ms([&] {
    cuda::attention_backward(d_out.view, q.view, k.view, v.view, probs.view, lengths.view, dq.view,
                             dk.view, dv.view, s, 0.0f, key);
  });
  report(name + " bwd bf16", "128x8x64x64 d64", ms, tflop_per_s(2 * flops, ms), "TFLOP/s");
}

// attention-fused: the flash-attention kernels (kernels/fused_attention.h) reading Q, K, V from
// one fused [tokens, 3 * heads * dh] projection output. FLOPs count the full T x S square even
// when causal (as the unfused rows above and compare_torch.py do); backward counts 2x forward.
// dropout_p > 0: the step's setting, the forward drawing the mask and storing its keep words, the
// backward loading them (rows named "p0.1"; the p 0 rows draw nothing).
void bench_fused_attention(KernelTimer& timer, int64_t batch, int64_t len, int64_t head_dim,
                           bool causal, float dropout_p = 0.0f) {
  AttentionShape s;
  s.batch = batch;
  s.q_len = len;
  s.kv_len = len;
  s.heads = 8;
  s.head_dim = head_dim;
  s.causal = causal;
  const int64_t rows = s.batch * s.q_len, width = s.heads * s.head_dim;
  DeviceTensor qkv({rows, 3 * width}, DType::bf16), d_qkv({rows, 3 * width}, DType::bf16),
      out({rows, width}, DType::bf16), d_out({rows, width}, DType::bf16),
      lse({s.batch, s.heads, s.q_len}, DType::f32), lengths({s.batch}, DType::i32);
  fill_uniform(qkv.view, -1, 1, 31);
  fill_uniform(d_out.view, -1, 1, 32);
  std::vector<int32_t> full(s.batch, static_cast<int32_t>(s.kv_len));
  CUDA_CHECK(cudaMemcpy(lengths.view.data, full.data(), full.size() * 4, cudaMemcpyHostToDevice));
  AttentionOperands in{qkv.view, qkv.view, qkv.view, 0, width, 2 * width};
  AttentionOperands grads{d_qkv.view, d_qkv.view, d_qkv.view, 0, width, 2 * width};
  const RngKey key{1, 1, 1};
  const double flops = 4.0 * s.batch * s.heads * s.q_len * s.kv_len * s.head_dim;
  std::string name = causal ? "attn-fused causal" : "attn-fused";
  if (dropout_p > 0.0f) name += " p" + std::to_string(dropout_p).substr(0, 3);
  DeviceTensor keep_storage({fused_attention_keep_bits_words(s)}, DType::i32);
  const Tensor keep_words = dropout_p > 0.0f ? keep_storage.view : Tensor();
  const std::string shape = std::to_string(batch) + "x8x" + std::to_string(len) + "x" +
                            std::to_string(len) + " d" + std::to_string(head_dim);
  double ms = timer.median_ms([&] {
    fused_attention_forward(in, lengths.view, out.view, lse.view, s, dropout_p, key, keep_words);
  });
  report(name + " fwd bf16", shape, ms, tflop_per_s(flops, ms), "TFLOP/s");
  ms = timer.median_ms([&] {
    fused_attention_backward(d_out.view, in, out.view, lse.view, lengths.view, grads, s, dropout_p,
                             key, keep_words);
  });
  report(name + " bwd bf16", shape, ms, tflop_per_s(2 * flops, ms), "TFLOP/s");
  // With the q, k, v bias gradients summed inside (the short-sentence wgmma kernel only: the row
  // is left out where backward declines them).
  DeviceTensor d_bias({3 * width}, DType::f32);
  fill_uniform(d_bias.view, 0, 0, 33);
  const AttentionBiasGrads bias{d_bias.view.rows(0, width), d_bias.view.rows(width, 2 * width),
                                d_bias.view.rows(2 * width, 3 * width)};
  bool summed = false;
  ms = timer.median_ms([&] {
    summed = fused_attention_backward(d_out.view, in, out.view, lse.view, lengths.view, grads, s,
                                      dropout_p, key, keep_words, bias);
  });
  if (summed) report(name + " bwd+bias bf16", shape, ms, tflop_per_s(2 * flops, ms), "TFLOP/s");
}

void bench_attention_fused_section(KernelTimer& timer) {
  for (bool causal : {false, true}) bench_fused_attention(timer, 128, 64, 64, causal);
  // The training step's shapes with its attention dropout: base 128 x 64, the Bible run's 512 x 32
  // (packed items, short_pack.cuh).
  for (bool causal : {false, true}) bench_fused_attention(timer, 128, 64, 64, causal, 0.1f);
  for (bool causal : {false, true}) bench_fused_attention(timer, 512, 32, 64, causal, 0.0f);
  for (bool causal : {false, true}) bench_fused_attention(timer, 512, 32, 64, causal, 0.3f);
  for (bool causal : {false, true}) bench_fused_attention(timer, 32, 512, 64, causal);
  bench_fused_attention(timer, 32, 512, 128, false);
}

void bench_embedding_and_dropout(KernelTimer& timer) {
  const int64_t rows = 16384, d = 512, vocab = 32768;
  DeviceTensor ids({rows}, DType::i32), table({vocab, d}, DType::bf16), out({rows, d}, DType::bf16),
      d_table({vocab, d}, DType::f32);
  fill_ids(ids.view, static_cast<int32_t>(vocab), 21);
  fill_uniform(table.view, -0.1f, 0.1f, 22);
  fill_uniform(d_table.view, 0, 0, 23);
  const double n = static_cast<double>(rows * d);
  double ms = timer.median_ms(
      [&] { cuda::embedding_forward(ids.view, table.view, out.view, 64, 22.6f, 1); });
  report("embedding_forward bf16", "16384x512", ms, gb_per_s(2 * n * 2, ms), "GB/s");
  ms = timer.median_ms(
      [&] { cuda::embedding_backward(ids.view, out.view, d_table.view, 22.6f, 1); });
  report("embedding_backward bf16", "16384x512", ms, gb_per_s(n * 2 + 2 * n * 4, ms), "GB/s");
  const RngKey key{5, 6, 7};
  ms = timer.median_ms([&] { cuda::dropout_forward(out.view, out.view, 0.1f, key); });
  report("dropout_forward bf16", "16384x512", ms, gb_per_s(2 * n * 2, ms), "GB/s");
  ms = timer.median_ms([&] { cuda::residual_add(out.view, out.view, out.view); });
  report("residual_add bf16", "16384x512", ms, gb_per_s(3 * n * 2, ms), "GB/s");
}

}  // namespace
}  // namespace nmt::bench

int main(int argc, char** argv) {
  using namespace nmt::bench;
  const char* usage =
      "usage: bench-kernels [--runs N] [--verbose] [--only "
      "attention-fused|column-sums|ffn-fc1|bias-grad-tails|residual-layernorm|layernorm-backward|"
      "cross-entropy|gemm-algos|wgrad|wgrad-batch]\n"
      "  gemm-algos (only with --only): every cuBLASLt algorithm the heuristic offers for each\n"
      "  product of a base training step; --verbose prints one line per algorithm\n"
      "  wgrad (only with --only): the weight gradients with split-k, and beside their dX\n"
      "  product on a second stream\n"
      "  wgrad-batch (only with --only): the 512x512 weight gradients as one pointer-array batch\n"
      "  of 1, 2, 3 and 6 products against one launch each\n";
  int runs = 30;
  bool verbose = false;
  // The sections --only can name, each run alone.
  const std::vector<std::pair<std::string, std::function<void(KernelTimer&)>>> sections = {
      {"attention-fused", [](KernelTimer& t) { bench_attention_fused_section(t); }},
      {"column-sums", [](KernelTimer& t) { bench_column_sums(t, report); }},
      {"ffn-fc1", [](KernelTimer& t) { bench_ffn_fc1(t, report); }},
      {"bias-grad-tails", [](KernelTimer& t) { bench_bias_grad_tails(t, report); }},
      {"residual-layernorm", [](KernelTimer& t) { bench_residual_layernorm(t, report); }},
      {"layernorm-backward", [](KernelTimer& t) { bench_layernorm_backward(t, report); }},
      {"cross-entropy", [](KernelTimer& t) { bench_cross_entropy(t); }},
      {"gemm-algos", [&verbose](KernelTimer& t) { bench_gemm_algos(t, verbose); }},
      {"wgrad", [](KernelTimer& t) { bench_wgrad(t); }},
      {"wgrad-batch", [](KernelTimer& t) { bench_wgrad_batch(t); }},
  };
  const std::function<void(KernelTimer&)>* only = nullptr;
  for (int i = 1; i < argc; ++i) {
    const auto named = [&](const auto& section) {
      return i + 1 < argc && section.first == argv[i + 1];
    };
    const auto section = std::find_if(sections.begin(), sections.end(), named);
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--verbose") == 0) {
      verbose = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && section != sections.end()) {
      only = &section->second;
      ++i;
    } else {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (runs < 1) {
    std::fprintf(stderr, "bench-kernels: --runs must be at least 1\n");
    return 2;
  }
  try {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("bench-kernels on %s (%d SMs, %.0f MB L2), median of %d runs, L2 flushed\n",
                prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6, runs);
    KernelTimer timer(runs, 3);
    if (only != nullptr) {
      (*only)(timer);
      return 0;
    }
    bench_layernorm(timer);
    bench_cross_entropy(timer);
    bench_adam(timer);
    bench_linear(timer, 8192, 512, 512, true);
    bench_linear(timer, 8192, 512, 32768, false);
    bench_linear(timer, 8192, 512, 2048, true);
    bench_ffn_fc1(timer, report);
    bench_column_sums(timer, report);
    bench_bias_grad_tails(timer, report);
    bench_residual_layernorm(timer, report);
    bench_layernorm_backward(timer, report);
    bench_attention(timer, false);
    bench_attention(timer, true);
    bench_embedding_and_dropout(timer);
    bench_attention_fused_section(timer);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
