// cuBLASLt descriptors, heuristic queries and single runs of one product (blas_plan.h).
#include "kernels/cuda/blas_plan.h"

#include <cstring>
#include <string>

#include "kernels/cuda/check.h"

namespace nmt::cuda {

LtEpilogue lt_epilogue(const LtMatmul& g, bool has_bias, bool bias_grad) {
  if (bias_grad) return LtEpilogue::bias_grad;
  if (g.relu) return has_bias ? LtEpilogue::relu_bias : LtEpilogue::relu;
  return has_bias ? LtEpilogue::bias : LtEpilogue::none;
}

int lt_alignment_of(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

LtDescriptors::LtDescriptors(const LtMatmul& g, LtEpilogue epilogue, const void* bias_grad)
    : epilogue_(epilogue) {
  // The destructor does not run when the constructor throws: free what was made so far.
  try {
    const cudaDataType_t ab = cuda_data_type(g.ab_type), cd = cuda_data_type(g.c_type);
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.trans_a,
                                                sizeof(g.trans_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.trans_b,
                                                sizeof(g.trans_b)));
    if (epilogue == LtEpilogue::bias_grad) {
      // BGRADB: the bias gradient has the size of D's columns and sums op(B) over k. Its dtype is
      // left at the default, C's (f32 for our weight gradients).
      const cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_BGRADB;
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &bias_grad, sizeof(bias_grad)));
    } else if (epilogue != LtEpilogue::none) {
      const cublasLtEpilogue_t e = epilogue == LtEpilogue::bias   ? CUBLASLT_EPILOGUE_BIAS
                                   : epilogue == LtEpilogue::relu ? CUBLASLT_EPILOGUE_RELU
                                                                  : CUBLASLT_EPILOGUE_RELU_BIAS;
      CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
    }
    if (epilogue == LtEpilogue::bias || epilogue == LtEpilogue::relu_bias) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &cd,
                                                  sizeof(cd)));
    }
    const bool a_n = g.trans_a == CUBLAS_OP_N, b_n = g.trans_b == CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, ab, a_n ? g.m : g.k, a_n ? g.k : g.m, g.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, ab, b_n ? g.k : g.n, b_n ? g.n : g.k, g.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, cd, g.m, g.n, g.ldc));
  } catch (...) {
    release();
    throw;
  }
}

LtDescriptors::~LtDescriptors() {
  release();
}

void LtDescriptors::release() noexcept {
  // Errors at thread or process exit are deliberately ignored.
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (desc) cublasLtMatmulDescDestroy(desc);
  c = b = a = nullptr;
  desc = nullptr;
}

cublasStatus_t lt_heuristic(cublasLtHandle_t lt, const LtDescriptors& d, const LtAlignments& align,
                            uint64_t workspace_bytes, int max_count,
                            std::vector<cublasLtMatmulHeuristicResult_t>& results) {
  results.assign(static_cast<size_t>(max_count > 0 ? max_count : 1), {});
  cublasLtMatmulPreference_t preference = nullptr;
  cublasStatus_t status = cublasLtMatmulPreferenceCreate(&preference);
  if (status != CUBLAS_STATUS_SUCCESS) {
    results.clear();
    return status;
  }
  const uint32_t align_a = align.a, align_b = align.b, align_c = align.c;
  int found_count = 0;
  status = cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(uint64_t));
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
    status = cublasLtMatmulAlgoGetHeuristic(lt, d.desc, d.a, d.b, d.c, d.c, preference,
                                            static_cast<int>(results.size()), results.data(),
                                            &found_count);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS) found_count = 0;
  results.resize(static_cast<size_t>(found_count));
  return status;
}

cublasStatus_t lt_run(cublasLtHandle_t lt, const LtDescriptors& d, const cublasLtMatmulAlgo_t& algo,
                      const LtMatmul& g, const void* a, const void* b, void* c, const void* bias,
                      float alpha, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (bias) {
    const cublasStatus_t status = cublasLtMatmulDescSetAttribute(
        d.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (status != CUBLAS_STATUS_SUCCESS) return status;
  }
  const float beta = g.accumulate ? 1.0f : 0.0f;
  return cublasLtMatmul(lt, d.desc, &alpha, a, d.a, b, d.b, &beta, c, d.c, c, d.c, &algo, workspace,
                        workspace_bytes, stream);
}

bool same_algo(const cublasLtMatmulAlgo_t& x, const cublasLtMatmulAlgo_t& y) {
  return std::memcmp(x.data, y.data, sizeof(x.data)) == 0;
}

namespace {

template <typename T>
long long algo_attribute(const cublasLtMatmulAlgo_t& algo,
                         cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return -1;
  return static_cast<long long>(value);
}

}  // namespace

std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
  // Tile, stages and cluster are cuBLASLt enum values (cublasLtMatmulTile_t,
  // cublasLtMatmulStages_t, cublasLtClusterShape_t in cublasLt.h).
  return "id " + std::to_string(algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID)) + " tile " +
         std::to_string(algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)) + " stages " +
         std::to_string(algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)) +
         " cluster " +
         std::to_string(algo_attribute<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)) +
         " split-k " +
         std::to_string(algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) +
         " reduction " +
         std::to_string(algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)) +
         " swizzle " +
         std::to_string(algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING)) +
         " custom " +
         std::to_string(algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
}

std::string describe(const LtMatmul& g) {
  return "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " A/B " + dtype_name(g.ab_type) + " C " + dtype_name(g.c_type);
}

}  // namespace nmt::cuda
