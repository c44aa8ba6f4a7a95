// cuBLAS / cuBLASLt handles and the cached cuBLASLt matrix product.
#include "kernels/cuda/blas.h"

#include <atomic>
#include <compare>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/scratch.h"

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

// The largest power of two (up to 16) dividing the address: cuBLASLt picks kernels by alignment.
int alignment_of(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
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
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // Errors at thread or process exit are deliberately ignored.
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
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

cublasLtHandle_t lt_handle(int device) {
  cublasLtHandle_t& h = thread_blas().lt[device];
  if (!h) CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

std::string describe(const LtMatmul& g) {
  return "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " A/B " + dtype_name(g.ab_type) + " C " + dtype_name(g.c_type);
}

// Builds the descriptors and asks the heuristic for the best algorithm; a plan enters the cache
// only once complete, so a failure leaves nothing half-built behind. `bias` is the bias (or bias
// gradient) pointer: the heuristic reads its alignment.
Plan& plan_for(const PlanKey& key, const LtMatmul& g, const void* bias, cublasLtHandle_t lt) {
  auto& plans = thread_blas().plans;
  auto found = plans.find(key);
  if (found != plans.end()) return *found->second;
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t ab = cuda_data_type(g.ab_type), cd = cuda_data_type(g.c_type);
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.trans_a,
                                              sizeof(g.trans_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.trans_b,
                                              sizeof(g.trans_b)));
  if (key.bias_grad) {
    // BGRADB: the bias gradient has the size of D's columns and sums op(B) over k. Its dtype is
    // left at the default, C's (f32 for our weight gradients).
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BGRADB;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &epilogue, sizeof(epilogue)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &bias, sizeof(bias)));
  } else if (key.bias || key.relu) {
    cublasLtEpilogue_t epilogue = !key.relu  ? CUBLASLT_EPILOGUE_BIAS
                                  : key.bias ? CUBLASLT_EPILOGUE_RELU_BIAS
                                             : CUBLASLT_EPILOGUE_RELU;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &epilogue, sizeof(epilogue)));
  }
  if (key.bias && !key.bias_grad) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                &cd, sizeof(cd)));
  }
  const bool a_n = g.trans_a == CUBLAS_OP_N, b_n = g.trans_b == CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, ab, a_n ? g.m : g.k, a_n ? g.k : g.m, g.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, ab, b_n ? g.k : g.n, b_n ? g.n : g.k, g.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->c, cd, g.m, g.n, g.ldc));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace = kBlasWorkspaceBytes;
  const uint32_t align_a = key.align_a, align_b = key.align_b, align_c = key.align_c;
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(lt, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                            preference, 1, &result, &found_count);
  cublasLtMatmulPreferenceDestroy(preference);
  // An epilogue cuBLASLt does not offer for these dtypes or this layout is not an error: the
  // caller falls back to its own reduction.
  if (key.bias_grad && (status == CUBLAS_STATUS_NOT_SUPPORTED ||
                        (status == CUBLAS_STATUS_SUCCESS && found_count == 0))) {
    plan->supported = false;
    return *plans.emplace(key, std::move(plan)).first->second;
  }
  if (status != CUBLAS_STATUS_SUCCESS || found_count == 0)
    throw std::runtime_error("cuBLASLt has no algorithm for the product " + describe(g) + " (" +
                             cublasGetStatusString(status) + ")");
  plan->algo = result.algo;
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
                    alignment_of(a),
                    alignment_of(b),
                    alignment_of(c),
                    bias ? alignment_of(bias) : 16};
  cublasLtHandle_t lt = lt_handle(device);
  Plan& plan = plan_for(key, g, bias, lt);
  if (!plan.supported) return false;
  if (bias)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof(bias)));
  const float beta = g.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c,
                              plan.c, &plan.algo, stream_resources(stream).blas_workspace(),
                              kBlasWorkspaceBytes, stream));
  return true;
}

}  // namespace

void lt_matmul(const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
               float alpha, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  run_matmul(g, a, b, c, bias, false, alpha, stream);
}

namespace {

// -1: not decided yet (NMT_BIAS_GRAD_EPILOGUE read at first use), else 0 or 1.
std::atomic<int> bias_grad_epilogue_setting{-1};

}  // namespace

void set_bias_grad_epilogue(bool on) {
  bias_grad_epilogue_setting.store(on ? 1 : 0);
}

bool bias_grad_epilogue() {
  int setting = bias_grad_epilogue_setting.load();
  if (setting < 0) {
    const char* value = std::getenv("NMT_BIAS_GRAD_EPILOGUE");
    setting = value != nullptr && std::string(value) == "1" ? 1 : 0;
    bias_grad_epilogue_setting.store(setting);
  }
  return setting == 1;
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
