// bench-kernels' gemm-algos entry. Each product is built as kernels/cuda/linear.cpp builds it, its
// descriptors come from kernels/cuda/blas_plan.h (the same code lt_matmul uses), and every
// algorithm the heuristic offers is timed with the L2 flushed before each run (KernelTimer).
#include "bench/bench-kernels/bench_gemm_algos.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"

namespace nmt::bench {
namespace {

constexpr int64_t kRows = 8192;      // 128 sentences x 64 tokens, each side
constexpr int kHeuristicCount = 16;  // algorithms asked of the heuristic per workspace size
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kWorkspaces[] = {cuda::kBlasWorkspaceBytes, 64 * kMiB, 128 * kMiB};
constexpr double kInf = std::numeric_limits<double>::infinity();

// The three products of linear.cpp: y = x Wᵀ (+ b, ReLU), dx = dy W, dW += dyᵀ x (fp32).
enum class Pass { forward, forward_relu, dx, dw };

struct Product {
  const char* name;
  Pass pass;
  int64_t in, out;  // the layer's W is [out, in]
  bool bias;        // forward only
  int per_step;     // how many times one base step runs it (6 encoder + 6 decoder layers)
};

// Per encoder layer: q|k|v, out, fc1, fc2. Per decoder layer: self q|k|v, self out, cross q, cross
// k|v, cross out, fc1, fc2. Once: the logits (no bias). Backward: dX and dW of each.
const Product kProducts[] = {
    {"fwd q|k|v +bias", Pass::forward, 512, 1536, true, 12},
    {"fwd out,cross-q +bias", Pass::forward, 512, 512, true, 24},
    {"fwd cross k|v +bias", Pass::forward, 512, 1024, true, 6},
    {"fwd fc1 relu+bias", Pass::forward_relu, 512, 2048, true, 12},
    {"fwd fc2 +bias", Pass::forward, 2048, 512, true, 12},
    {"fwd logits", Pass::forward, 512, 32000, false, 1},
    {"dX q|k|v", Pass::dx, 512, 1536, false, 12},
    {"dX out,cross-q", Pass::dx, 512, 512, false, 24},
    {"dX cross k|v", Pass::dx, 512, 1024, false, 6},
    {"dX fc1", Pass::dx, 512, 2048, false, 12},
    {"dX fc2", Pass::dx, 2048, 512, false, 12},
    {"dX logits", Pass::dx, 512, 32000, false, 1},
    {"dW q|k|v", Pass::dw, 512, 1536, false, 12},
    {"dW out,cross-q", Pass::dw, 512, 512, false, 24},
    {"dW cross k|v", Pass::dw, 512, 1024, false, 6},
    {"dW fc1", Pass::dw, 512, 2048, false, 12},
    {"dW fc2", Pass::dw, 2048, 512, false, 12},
    {"dW logits", Pass::dw, 512, 32000, false, 1},
};

// The LtMatmul linear.cpp passes for `p` at kRows rows.
cuda::LtMatmul matmul_of(const Product& p) {
  switch (p.pass) {
    case Pass::forward:
    case Pass::forward_relu:
      return cuda::linear_forward_product(kRows, p.in, p.out, DType::bf16,
                                          p.pass == Pass::forward_relu);
    case Pass::dx:
      return cuda::linear_dx_product(kRows, p.in, p.out, DType::bf16);
    case Pass::dw:
      break;
  }
  return cuda::linear_dw_product(kRows, p.in, p.out, DType::bf16);
}

struct Candidate {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_needed = 0;
  float waves = 0;
  uint64_t listed_under = 0;  // the smallest workspace whose heuristic list holds it
  int index = -1;             // its place in the 32 MiB list, -1 when only larger ones list it
  double ms = kInf;
  std::string failure;
};

struct Outcome {
  const Product* product = nullptr;
  double flops = 0;
  double heuristic_ms = kInf;  // the 32 MiB list's first algorithm: what lt_matmul runs
  double best_ms = kInf;       // the fastest of the 32 MiB list
  int best_index = -1;
  double best_any_ms = kInf;  // the fastest of all lists
  uint64_t best_any_workspace = 0;
  // The first pick of the heuristic asked with each workspace size (what lt_matmul would run with
  // kBlasWorkspaceBytes raised to it): its place among the candidates, and its time.
  int first_pick[std::size(kWorkspaces)] = {-1, -1, -1};
  double first_pick_ms[std::size(kWorkspaces)] = {kInf, kInf, kInf};
  int listed = 0, added_by_larger = 0, failed = 0;
  int autotune_index = -1;  // where the engine's autotuner's choice stands in the 32 MiB list
  bool ok = false;
};

double tflops(double flops, double ms) {
  return flops / (ms * 1e-3) / 1e12;
}

std::string shape_of(const cuda::LtMatmul& g) {
  char text[96];
  std::snprintf(text, sizeof(text), "m%lld n%lld k%lld", static_cast<long long>(g.m),
                static_cast<long long>(g.n), static_cast<long long>(g.k));
  return text;
}

// The heuristic's candidates for every workspace size, the 32 MiB list first and in its order.
std::vector<Candidate> gather_candidates(cublasLtHandle_t lt, const cuda::LtDescriptors& d,
                                         Outcome& outcome) {
  std::vector<Candidate> candidates;
  for (size_t w = 0; w < std::size(kWorkspaces); ++w) {
    const uint64_t workspace = kWorkspaces[w];
    std::vector<cublasLtMatmulHeuristicResult_t> results;
    const cublasStatus_t status =
        cuda::lt_heuristic(lt, d, cuda::LtAlignments{}, workspace, kHeuristicCount, results);
    if (status != CUBLAS_STATUS_SUCCESS)
      std::printf("  heuristic with %llu MiB workspace: %s\n",
                  static_cast<unsigned long long>(workspace / kMiB), cublasGetStatusString(status));
    int index = 0;
    for (const auto& r : results) {
      const int place = index++;
      if (r.state != CUBLAS_STATUS_SUCCESS) continue;
      int known = -1;
      for (size_t i = 0; i < candidates.size() && known < 0; ++i)
        if (cuda::same_algo(candidates[i].algo, r.algo)) known = static_cast<int>(i);
      if (place == 0)
        outcome.first_pick[w] = known >= 0 ? known : static_cast<int>(candidates.size());
      if (known >= 0) continue;
      Candidate c;
      c.algo = r.algo;
      c.workspace_needed = r.workspaceSize;
      c.waves = r.wavesCount;
      c.listed_under = workspace;
      c.index = workspace == cuda::kBlasWorkspaceBytes ? place : -1;
      candidates.push_back(c);
    }
    if (workspace == cuda::kBlasWorkspaceBytes)
      outcome.listed = static_cast<int>(candidates.size());
  }
  outcome.added_by_larger = static_cast<int>(candidates.size()) - outcome.listed;
  // lt_matmul asks for one algorithm: it must be the list's first, or the "heuristic" row below
  // is not what the engine runs.
  std::vector<cublasLtMatmulHeuristicResult_t> single;
  cuda::lt_heuristic(lt, d, cuda::LtAlignments{}, cuda::kBlasWorkspaceBytes, 1, single);
  if (!single.empty() && !candidates.empty() && candidates[0].index == 0 &&
      !cuda::same_algo(single[0].algo, candidates[0].algo))
    std::printf("  note: the heuristic's single pick is not the first of its list of %d\n",
                kHeuristicCount);
  return candidates;
}

void bench_product(KernelTimer& timer, const Product& p, void* workspace, bool verbose,
                   Outcome& outcome) {
  const cuda::LtMatmul g = matmul_of(p);
  outcome.product = &p;
  outcome.flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * g.k;
  const bool forward = p.pass == Pass::forward || p.pass == Pass::forward_relu;
  // a: W (forward, dx) or x (dw); b: x (forward), dy (dx, dw); c: y, dx or dW.
  const int64_t a_elems = p.pass == Pass::dw ? kRows * p.in : p.out * p.in;
  const int64_t b_elems = forward ? kRows * p.in : kRows * p.out;
  DeviceTensor a({a_elems}, DType::bf16), b({b_elems}, DType::bf16), c({g.ldc * g.n}, g.c_type),
      bias({p.out}, DType::bf16);
  fill_uniform(a.view, -1, 1, 51);
  fill_uniform(b.view, -1, 1, 52);
  fill_uniform(bias.view, -0.5f, 0.5f, 53);
  const void* bias_data = p.bias ? bias.view.data : nullptr;
  const cuda::LtDescriptors d(g, cuda::lt_epilogue(g, p.bias, false));
  cublasLtHandle_t lt = cuda::lt_handle_for_current_device();
  cudaStream_t stream = cuda::current_stream();

  const char* epilogue = p.pass == Pass::forward_relu ? " relu+bias"
                         : p.bias                     ? " +bias"
                         : g.accumulate               ? " +=C f32"
                                                      : "";
  std::printf("%s: %s%s, %d per step\n", p.name, shape_of(g).c_str(), epilogue, p.per_step);
  std::vector<Candidate> candidates = gather_candidates(lt, d, outcome);
  std::printf("  heuristic lists %d algorithms with 32 MiB of workspace; 64 / 128 MiB add %d\n",
              outcome.listed, outcome.added_by_larger);

  for (Candidate& cand : candidates) {
    auto run = [&] {
      return cuda::lt_run(lt, d, cand.algo, g, a.view.data, b.view.data, c.view.data, bias_data,
                          1.0f, workspace, cand.listed_under, stream);
    };
    // Each candidate adds from zero (dW); one untimed run shows whether it runs at all.
    CUDA_CHECK(cudaMemsetAsync(c.view.data, 0, c.view.bytes(), stream));
    const cublasStatus_t status = run();
    if (status != CUBLAS_STATUS_SUCCESS) {
      cand.failure = cublasGetStatusString(status);
      ++outcome.failed;
      continue;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cand.ms = timer.median_ms([&] { CUBLAS_CHECK(run()); });
  }

  for (size_t w = 0; w < std::size(kWorkspaces); ++w)
    if (outcome.first_pick[w] >= 0) outcome.first_pick_ms[w] = candidates[outcome.first_pick[w]].ms;
  for (const Candidate& cand : candidates) {
    if (cand.index == 0) outcome.heuristic_ms = cand.ms;
    if (cand.index >= 0 && cand.ms < outcome.best_ms) {
      outcome.best_ms = cand.ms;
      outcome.best_index = cand.index;
    }
    if (cand.ms < outcome.best_any_ms) {
      outcome.best_any_ms = cand.ms;
      outcome.best_any_workspace = cand.listed_under;
    }
    if (!verbose) continue;
    // "#3": third in the 32 MiB list; "+64MiB": listed only with 64 MiB of workspace.
    char place[32];
    if (cand.index >= 0)
      std::snprintf(place, sizeof(place), "#%d", cand.index);
    else
      std::snprintf(place, sizeof(place), "+%lluMiB",
                    static_cast<unsigned long long>(cand.listed_under / kMiB));
    if (!cand.failure.empty()) {
      std::printf("  %-7s failed: %s (%s)\n", place, cand.failure.c_str(),
                  cuda::describe_algo(cand.algo).c_str());
      continue;
    }
    std::printf("  %-7s %8.4f ms %6.1f TFLOP/s  ws %6.2f MiB waves %5.2f  %s\n", place, cand.ms,
                tflops(outcome.flops, cand.ms), static_cast<double>(cand.workspace_needed) / kMiB,
                cand.waves, cuda::describe_algo(cand.algo).c_str());
  }
  if (outcome.heuristic_ms == kInf) {
    std::printf("  the heuristic's first pick did not run: no comparison\n");
    return;
  }
  // What NMT_GEMM_AUTOTUNE=1 would keep for this product (warm L2, median of 5, 3% margin).
  const cublasLtMatmulAlgo_t tuned =
      cuda::autotune_algo(lt, d, cuda::LtAlignments{}, candidates[0].algo, g, a.view.data,
                          b.view.data, c.view.data, bias_data, 1.0f, stream);
  for (const Candidate& cand : candidates)
    if (cand.index >= 0 && cuda::same_algo(cand.algo, tuned)) outcome.autotune_index = cand.index;
  outcome.ok = true;
  const double saving = 1.0 - outcome.best_ms / outcome.heuristic_ms;
  std::printf("  heuristic #0  %8.4f ms %6.1f TFLOP/s\n", outcome.heuristic_ms,
              tflops(outcome.flops, outcome.heuristic_ms));
  std::printf("  best      #%-2d %8.4f ms %6.1f TFLOP/s  saves %5.1f%% = %.4f ms per step\n",
              outcome.best_index, outcome.best_ms, tflops(outcome.flops, outcome.best_ms),
              100.0 * saving, (outcome.heuristic_ms - outcome.best_ms) * p.per_step);
  std::printf("  autotune keeps #%d\n", outcome.autotune_index);
  for (size_t w = 1; w < std::size(kWorkspaces); ++w)
    if (outcome.first_pick[w] != outcome.first_pick[0])
      std::printf("  heuristic #0 with %llu MiB workspace is another: %.4f ms %6.1f TFLOP/s\n",
                  static_cast<unsigned long long>(kWorkspaces[w] / kMiB), outcome.first_pick_ms[w],
                  tflops(outcome.flops, outcome.first_pick_ms[w]));
  if (outcome.best_any_ms < outcome.best_ms)
    std::printf("  best with %llu MiB workspace: %.4f ms %6.1f TFLOP/s\n",
                static_cast<unsigned long long>(outcome.best_any_workspace / kMiB),
                outcome.best_any_ms, tflops(outcome.flops, outcome.best_any_ms));
  if (outcome.failed > 0) std::printf("  %d candidates failed to run\n", outcome.failed);
  std::fflush(stdout);
}

void print_summary(const std::vector<Outcome>& outcomes) {
  std::printf("\n%-22s %5s %9s %7s %9s %7s %4s %7s %9s %9s %5s\n", "product", "/step", "heur ms",
              "TFLOP/s", "best ms", "TFLOP/s", "#", "saving", "ms/step", "any-ws ms", "tune#");
  double heuristic_step = 0, best_step = 0, best_any_step = 0, flops_step = 0;
  double first_pick_step[std::size(kWorkspaces)] = {};
  int missing = 0;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      std::printf("%-22s %5d  (not measured)\n", o.product->name, o.product->per_step);
      ++missing;
      continue;
    }
    const int n = o.product->per_step;
    heuristic_step += n * o.heuristic_ms;
    best_step += n * o.best_ms;
    best_any_step += n * o.best_any_ms;
    for (size_t w = 0; w < std::size(kWorkspaces); ++w)
      first_pick_step[w] += n * o.first_pick_ms[w];
    flops_step += n * o.flops;
    std::printf("%-22s %5d %9.4f %7.1f %9.4f %7.1f %4d %6.1f%% %9.4f %9.4f %5d\n", o.product->name,
                n, o.heuristic_ms, tflops(o.flops, o.heuristic_ms), o.best_ms,
                tflops(o.flops, o.best_ms), o.best_index,
                100.0 * (1.0 - o.best_ms / o.heuristic_ms), n * (o.heuristic_ms - o.best_ms),
                o.best_any_ms, o.autotune_index);
  }
  if (heuristic_step <= 0) return;
  std::printf("\none step's products, each timed from a cold L2:\n");
  auto line = [&](const std::string& label, double ms) {
    std::printf("  %-30s %8.3f ms %6.1f TFLOP/s  saves %6.3f ms (%4.1f%%)\n", label.c_str(), ms,
                tflops(flops_step, ms), heuristic_step - ms, 100.0 * (1.0 - ms / heuristic_step));
  };
  for (size_t w = 0; w < std::size(kWorkspaces); ++w)
    line("heuristic's picks, " + std::to_string(kWorkspaces[w] / kMiB) + " MiB",
         first_pick_step[w]);
  line("best of the 32 MiB lists", best_step);
  line("best with up to 128 MiB", best_any_step);
  if (missing > 0)
    std::printf("  (%d products not measured are left out of these sums)\n", missing);
}

}  // namespace

void bench_gemm_algos(KernelTimer& timer, bool verbose) {
  std::vector<Outcome> outcomes;
  try {
    DeviceTensor workspace({static_cast<int64_t>(kWorkspaces[2] / 4)}, DType::f32);
    for (const Product& p : kProducts) {
      Outcome outcome;
      outcome.product = &p;
      try {
        bench_product(timer, p, workspace.view.data, verbose, outcome);
      } catch (const std::exception& e) {
        std::printf("  %s failed: %s\n", p.name, e.what());
        outcome.ok = false;
      }
      outcomes.push_back(outcome);
    }
  } catch (const std::exception& e) {
    std::printf("gemm-algos: %s\n", e.what());
  }
  if (!outcomes.empty()) print_summary(outcomes);
  std::fflush(stdout);
}

}  // namespace nmt::bench
