// bench-kernels' wgrad entry: the weight-gradient products of a base step (a small output, k = 8192
// rows) (1) with cuBLASLt's split-k set on the heuristic's algorithms, checked against the
// heuristic's result and for the same bits on a rerun, and (2) beside their dX product on a second
// stream, as linear_backward runs them, with and without an SM-count target on the dX product.
#include "bench/bench-kernels/bench_wgrad.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
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

constexpr int64_t kRows = 8192;  // 128 sentences x 64 tokens
constexpr int kHeuristicCount = 4;
constexpr int kSplits[] = {2, 3, 4, 6, 8, 12, 16};
constexpr uint32_t kSchemes[] = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                 CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
                                 CUBLASLT_REDUCTION_SCHEME_INPLACE};

struct Shape {
  const char* name;
  int64_t in, out;  // the layer's W is [out, in]
  int per_step;
};

const Shape kShapes[] = {{"out,cross-q", 512, 512, 24},
                         {"q|k|v", 512, 1536, 12},
                         {"cross k|v", 512, 1024, 6},
                         {"fc1", 512, 2048, 12},
                         {"fc2", 2048, 512, 12}};

cuda::LtMatmul dw_matmul(const Shape& s) {
  return cuda::linear_dw_product(kRows, s.in, s.out, DType::bf16);
}

cuda::LtMatmul dx_matmul(const Shape& s) {
  return cuda::linear_dx_product(kRows, s.in, s.out, DType::bf16);
}

double tflops(const cuda::LtMatmul& g, double ms) {
  return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) /
         (ms * 1e-3) / 1e12;
}

std::vector<float> read_f32(const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), t.data, t.bytes(), cudaMemcpyDeviceToHost));
  return host;
}

cublasLtMatmulAlgo_t heuristic_pick(cublasLtHandle_t lt, const cuda::LtDescriptors& d) {
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  const cublasStatus_t status =
      cuda::lt_heuristic(lt, d, cuda::LtAlignments{}, cuda::kBlasWorkspaceBytes, 1, results);
  if (status != CUBLAS_STATUS_SUCCESS || results.empty())
    throw std::runtime_error("no cuBLASLt algorithm");
  return results[0].algo;
}

struct SplitResult {
  std::string what;
  double ms = 0;
  double max_rel_diff = 0;
  bool same_bits_rerun = false;
};

void bench_split(KernelTimer& timer, const Shape& s, void* workspace) {
  const cuda::LtMatmul g = dw_matmul(s);
  DeviceTensor x({kRows * s.in}, DType::bf16), dy({kRows * s.out}, DType::bf16),
      c({s.in * s.out}, DType::f32);
  fill_uniform(x.view, -1, 1, 61);
  fill_uniform(dy.view, -1, 1, 62);
  const cuda::LtDescriptors d(g, cuda::LtEpilogue::none);
  cublasLtHandle_t lt = cuda::lt_handle_for_current_device();
  cudaStream_t stream = cuda::current_stream();
  std::vector<cublasLtMatmulHeuristicResult_t> listed;
  cuda::lt_heuristic(lt, d, cuda::LtAlignments{}, cuda::kBlasWorkspaceBytes, kHeuristicCount,
                     listed);
  if (listed.empty()) throw std::runtime_error("no cuBLASLt algorithm");
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cuda::lt_run(lt, d, algo, g, x.view.data, dy.view.data, c.view.data, nullptr, 1.0f,
                        workspace, cuda::kBlasWorkspaceBytes, stream);
  };
  auto from_zero = [&](const cublasLtMatmulAlgo_t& algo) {
    CUDA_CHECK(cudaMemsetAsync(c.view.data, 0, c.view.bytes(), stream));
    CUBLAS_CHECK(run(algo));
    return read_f32(c.view);
  };
  const std::vector<float> reference = from_zero(listed[0].algo);
  float scale = 0;
  for (float v : reference) scale = std::max(scale, std::fabs(v));
  std::vector<SplitResult> results;
  int rejected = 0;
  for (size_t i = 0; i < listed.size(); ++i) {
    for (int split : kSplits)
      for (uint32_t scheme : kSchemes) {
        cublasLtMatmulAlgo_t algo = listed[i].algo;
        const int32_t splits = split;
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                 sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &scheme,
                                                 sizeof(scheme)) != CUBLAS_STATUS_SUCCESS) {
          ++rejected;
          continue;
        }
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(lt, d.desc, d.a, d.b, d.c, d.c, &algo, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > cuda::kBlasWorkspaceBytes) {
          ++rejected;
          continue;
        }
        std::vector<float> first;
        try {
          first = from_zero(algo);
        } catch (const std::exception&) {
          ++rejected;
          continue;
        }
        SplitResult r;
        char place[32];
        std::snprintf(place, sizeof(place), "#%zu ", i);
        r.what = place;
        r.what += cuda::describe_algo(algo);
        r.same_bits_rerun = from_zero(algo) == first;
        for (size_t e = 0; e < first.size(); ++e)
          r.max_rel_diff = std::max(
              r.max_rel_diff, static_cast<double>(std::fabs(first[e] - reference[e]) / scale));
        r.ms = timer.median_ms([&] { CUBLAS_CHECK(run(algo)); });
        results.push_back(r);
      }
  }
  const double heuristic_ms = timer.median_ms([&] { CUBLAS_CHECK(run(listed[0].algo)); });
  std::printf("dW %s: m%lld n%lld k%lld f32 +=, %d per step; %d split configurations rejected\n",
              s.name, static_cast<long long>(g.m), static_cast<long long>(g.n),
              static_cast<long long>(g.k), s.per_step, rejected);
  std::printf("  heuristic  %8.4f ms %6.1f TFLOP/s  %s\n", heuristic_ms, tflops(g, heuristic_ms),
              cuda::describe_algo(listed[0].algo).c_str());
  std::sort(results.begin(), results.end(),
            [](const SplitResult& a, const SplitResult& b) { return a.ms < b.ms; });
  for (size_t i = 0; i < results.size() && i < 6; ++i)
    std::printf("  split      %8.4f ms %6.1f TFLOP/s  rel diff %.2e  rerun %s  %s\n", results[i].ms,
                tflops(g, results[i].ms), results[i].max_rel_diff,
                results[i].same_bits_rerun ? "same bits" : "DIFFERENT bits",
                results[i].what.c_str());
  if (!results.empty())
    std::printf("  best split saves %.4f ms a step\n", (heuristic_ms - results[0].ms) * s.per_step);
  std::fflush(stdout);
}

// The dX product's descriptors with an SM-count target (0: none) and the heuristic's pick for them.
struct TargetedDx {
  TargetedDx(const cuda::LtMatmul& g, int sm_target, cublasLtHandle_t lt)
      : d(g, cuda::LtEpilogue::none) {
    if (sm_target > 0) {
      const int32_t target = sm_target;
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                  &target, sizeof(target)));
    }
    algo = heuristic_pick(lt, d);
  }
  cuda::LtDescriptors d;
  cublasLtMatmulAlgo_t algo{};
};

void bench_beside(KernelTimer& timer, const Shape& s) {
  const cuda::LtMatmul gw = dw_matmul(s), gx = dx_matmul(s);
  DeviceTensor x({kRows * s.in}, DType::bf16), dy({kRows * s.out}, DType::bf16),
      w({s.out * s.in}, DType::bf16), dx({kRows * s.in}, DType::bf16),
      dw({s.in * s.out}, DType::f32);
  fill_uniform(x.view, -1, 1, 71);
  fill_uniform(dy.view, -1, 1, 72);
  fill_uniform(w.view, -1, 1, 73);
  cublasLtHandle_t lt = cuda::lt_handle_for_current_device();
  cudaStream_t main = cuda::current_stream();
  cuda::OwnedStream side;
  void* main_ws = cuda::stream_resources(main).blas_workspace();
  void* side_ws = cuda::stream_resources(side.get()).blas_workspace();
  const cuda::LtDescriptors dw_desc(gw, cuda::LtEpilogue::none);
  const cublasLtMatmulAlgo_t dw_algo = heuristic_pick(lt, dw_desc);
  auto run_dw = [&](cudaStream_t stream, void* ws) {
    CUBLAS_CHECK(cuda::lt_run(lt, dw_desc, dw_algo, gw, x.view.data, dy.view.data, dw.view.data,
                              nullptr, 1.0f, ws, cuda::kBlasWorkspaceBytes, stream));
  };
  auto run_dx = [&](const TargetedDx& t) {
    CUBLAS_CHECK(cuda::lt_run(lt, t.d, t.algo, gx, w.view.data, dy.view.data, dx.view.data, nullptr,
                              1.0f, main_ws, cuda::kBlasWorkspaceBytes, main));
  };
  const int sms = cuda::multiprocessor_count();
  const TargetedDx plain(gx, 0, lt);
  const double dx_ms = timer.median_ms([&] { run_dx(plain); });
  const double dw_ms = timer.median_ms([&] { run_dw(main, main_ws); });
  const double one_stream = timer.median_ms([&] {
    run_dx(plain);
    run_dw(main, main_ws);
  });
  std::printf("dX + dW %s (%d per step): dX %.4f ms, dW %.4f ms, one stream %.4f ms\n", s.name,
              s.per_step, dx_ms, dw_ms, one_stream);
  for (int target : {0, sms - 8, sms - 16, sms - 32, sms * 3 / 4}) {
    const TargetedDx t(gx, target, lt);
    const double beside = timer.median_ms([&] {
      side.wait_for(main);
      run_dw(side.get(), side_ws);
      run_dx(t);
      side.make_wait(main);
    });
    const double dx_alone = timer.median_ms([&] { run_dx(t); });
    std::printf(
        "  beside, dX SM target %3d: %.4f ms (saves %.4f ms a step; dX alone %.4f ms)  %s\n",
        target, beside, (one_stream - beside) * s.per_step, dx_alone,
        cuda::describe_algo(t.algo).c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void bench_wgrad(KernelTimer& timer) {
  try {
    DeviceTensor workspace({static_cast<int64_t>(cuda::kBlasWorkspaceBytes / 4)}, DType::f32);
    for (const Shape& s : kShapes) bench_split(timer, s, workspace.view.data);
    for (const Shape& s : kShapes) bench_beside(timer, s);
  } catch (const std::exception& e) {
    std::printf("wgrad: %s\n", e.what());
  }
  std::fflush(stdout);
}

}  // namespace nmt::bench
