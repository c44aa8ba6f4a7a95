// cuBLAS / cuBLASLt handles and the cached cuBLASLt matrix product (its descriptors and heuristic
// queries in blas_plan.cpp, the opt-in autotuner in blas_autotune.cpp).
#include "kernels/cuda/blas.h"

#include <compare>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/scratch.h"
#include "kernels/env_switch.h"

namespace nmt::cuda {
namespace {

constexpr int kMaxDevices = 64;

int current_device() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices)
    throw std::runtime_error("CUDA device index " + std::to_string(device) + " out of range");
  return device;
}

struct PlanKey {
  int device;
  int trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  int ab_type, c_type;
  bool accumulate, bias, relu, bias_grad;
  int align_a, align_b, align_c, align_bias;
  auto operator<=>(const PlanKey&) const = default;
};

// Descriptors and the chosen algorithm of one product shape. A bias-gradient plan for which the
// heuristic found no algorithm is kept with supported = false, so it is asked only once.
struct Plan {
  bool supported = true;
  std::unique_ptr<LtDescriptors> descriptors;
  LtAlignments align;
  cublasLtMatmulAlgo_t algo{};  // the heuristic's pick
  // Autotuning (opt-in): whether this plan's candidates were timed, and the algorithm kept then
  // (`algo` unless another beat it by the margin). Plans keep both, so turning autotuning off
  // again returns to the heuristic's picks.
  bool tuned = false;
  cublasLtMatmulAlgo_t tuned_algo{};
};

struct ThreadBlas {
  cublasLtHandle_t lt[kMaxDevices] = {};
  cublasHandle_t blas[kMaxDevices] = {};
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  ThreadBlas() = default;
  ThreadBlas(const ThreadBlas&) = delete;
  ThreadBlas& operator=(const ThreadBlas&) = delete;
  ~ThreadBlas() {
    plans.clear();
    for (auto h : blas)
      if (h) cublasDestroy(h);
    for (auto h : lt)
      if (h) cublasLtDestroy(h);
  }
};

ThreadBlas& thread_blas() {
  thread_local ThreadBlas state;
  return state;
}

// Builds the descriptors and asks the heuristic for the best algorithm; a plan enters the cache
// only once complete, so a failure leaves nothing half-built behind. `bias` is the bias (or bias
// gradient) pointer: a bias gradient's is set before the heuristic is asked.
Plan& plan_for(const PlanKey& key, const LtMatmul& g, const void* bias, cublasLtHandle_t lt) {
  auto& plans = thread_blas().plans;
  auto found = plans.find(key);
  if (found != plans.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  plan->descriptors = std::make_unique<LtDescriptors>(
      g, lt_epilogue(g, bias != nullptr, key.bias_grad), key.bias_grad ? bias : nullptr);
  plan->align = LtAlignments{key.align_a, key.align_b, key.align_c};
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  const cublasStatus_t status =
      lt_heuristic(lt, *plan->descriptors, plan->align, kBlasWorkspaceBytes, 1, results);
  // An epilogue cuBLASLt does not offer for these dtypes or this layout is not an error: the
  // caller falls back to its own reduction.
  if (key.bias_grad && (status == CUBLAS_STATUS_NOT_SUPPORTED ||
                        (status == CUBLAS_STATUS_SUCCESS && results.empty()))) {
    plan->supported = false;
    return *plans.emplace(key, std::move(plan)).first->second;
  }
  if (status != CUBLAS_STATUS_SUCCESS || results.empty())
    throw std::runtime_error("cuBLASLt has no algorithm for the product " + describe(g) + " (" +
                             cublasGetStatusString(status) + ")");
  plan->algo = results[0].algo;
  return *plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    case DType::i32:
      return CUDA_R_32I;
  }
  return CUDA_R_32F;
}

cublasLtHandle_t lt_handle_for_current_device() {
  cublasLtHandle_t& h = thread_blas().lt[current_device()];
  if (!h) CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

cublasHandle_t blas_handle(cudaStream_t stream) {
  const int device = current_device();
  cublasHandle_t& h = thread_blas().blas[device];
  if (!h) CUBLAS_CHECK(cublasCreate(&h));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace is set after it.
  CUBLAS_CHECK(cublasSetStream(h, stream));
  CUBLAS_CHECK(
      cublasSetWorkspace(h, stream_resources(stream).blas_workspace(), kBlasWorkspaceBytes));
  return h;
}

namespace {

// Runs the product with the plan of (g, pointers, epilogue); returns false, running nothing, when
// the plan is an unsupported bias-gradient one.
bool run_matmul(const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
                bool bias_grad, float alpha, cudaStream_t stream) {
  const int device = current_device();
  const PlanKey key{device,
                    static_cast<int>(g.trans_a),
                    static_cast<int>(g.trans_b),
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldc,
                    static_cast<int>(g.ab_type),
                    static_cast<int>(g.c_type),
                    g.accumulate,
                    bias != nullptr && !bias_grad,
                    g.relu,
                    bias_grad,
                    lt_alignment_of(a),
                    lt_alignment_of(b),
                    lt_alignment_of(c),
                    bias ? lt_alignment_of(bias) : 16};
  cublasLtHandle_t lt = lt_handle_for_current_device();
  Plan& plan = plan_for(key, g, bias, lt);
  if (!plan.supported) return false;
  const cublasLtMatmulAlgo_t* algo = &plan.algo;
  if (gemm_autotune()) {
    // Timing needs host synchronisation, which a graph capture forbids: a plan first used while
    // capturing runs the heuristic's pick there and is tuned at its first uncaptured use.
    if (!plan.tuned && !stream_is_capturing(stream)) {
      plan.tuned_algo = autotune_algo(lt, *plan.descriptors, plan.align, plan.algo, g, a, b, c,
                                      bias, alpha, stream);
      plan.tuned = true;
    }
    if (plan.tuned) algo = &plan.tuned_algo;
  }
  CUBLAS_CHECK(lt_run(lt, *plan.descriptors, *algo, g, a, b, c, bias, alpha,
                      stream_resources(stream).blas_workspace(), kBlasWorkspaceBytes, stream));
  return true;
}

}  // namespace

void lt_matmul(const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
               float alpha, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  run_matmul(g, a, b, c, bias, false, alpha, stream);
}

namespace {

EnvSwitch bias_grad_epilogue_switch("NMT_BIAS_GRAD_EPILOGUE", /*default_on=*/false);

}  // namespace

void set_bias_grad_epilogue(bool on) {
  bias_grad_epilogue_switch.set(on);
}

bool bias_grad_epilogue() {
  return bias_grad_epilogue_switch.get();
}

bool lt_matmul_bias_grad(const LtMatmul& g, const void* a, const void* b, void* c, void* bias_grad,
                         float alpha, cudaStream_t stream) {
  if (g.relu || bias_grad == nullptr)
    throw std::invalid_argument("lt_matmul_bias_grad: needs a bias-gradient vector and no ReLU");
  if (g.m == 0 || g.n == 0 || g.k == 0) return false;
  if (!bias_grad_epilogue()) return false;
  return run_matmul(g, a, b, c, bias_grad, true, alpha, stream);
}

}  // namespace nmt::cuda
