// bench-kernels' wgrad-batch entry (bench_wgrad_batch.h): cuBLASLt's pointer-array batch of
// dW += dyᵀ x products (linear_dw_product's layout) against one launch a product.
#include "bench/bench-kernels/bench_wgrad_batch.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"

namespace nmt::bench {
namespace {

constexpr int64_t kRows = 8192;  // 128 sentences x 64 tokens
constexpr int64_t kIn = 512, kOut = 512;
constexpr int kDecoderLayers = 6;

// A dW product's descriptors (column-major as cuBLAS sees linear_dw_product: dWᵀ [in, out] =
// x [in, rows] · dyᵀ [rows, out]), over `batch` products in pointer-array mode where batch > 1.
struct BatchDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  explicit BatchDescriptors(int batch) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t n = CUBLAS_OP_N, t = CUBLAS_OP_T;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof(n)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof(t)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, kIn, kRows, kIn));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, kOut, kRows, kOut));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, kIn, kOut, kIn));
    if (batch == 1) return;
    const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
    for (cublasLtMatrixLayout_t layout : {a, b, c}) {
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                    &batch, sizeof(batch)));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE,
                                                    &mode, sizeof(mode)));
    }
  }
  ~BatchDescriptors() {
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  BatchDescriptors(const BatchDescriptors&) = delete;
  BatchDescriptors& operator=(const BatchDescriptors&) = delete;

  cublasLtMatmulAlgo_t heuristic(cublasLtHandle_t lt) const {
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t bytes = cuda::kBlasWorkspaceBytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
      throw std::runtime_error("no cuBLASLt algorithm for the batch");
    return result.algo;
  }
};

void run(cublasLtHandle_t lt, const BatchDescriptors& d, const cublasLtMatmulAlgo_t& algo,
         const void* x, const void* dy, void* dw, void* workspace, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt, d.op, &alpha, x, d.a, dy, d.b, &beta, dw, d.c, dw, d.c, &algo,
                              workspace, cuda::kBlasWorkspaceBytes, stream));
}

// The largest difference between the two, relative to the largest magnitude of `want` (sums over
// 8192 rows, some near 0: an elementwise relative gap would say little).
double max_scaled_gap(const std::vector<float>& got, const std::vector<float>& want) {
  double gap = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    gap = std::max(gap, std::fabs(double{got[i]} - want[i]));
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  return scale > 0 ? gap / scale : gap;
}

void bench_batch(KernelTimer& timer, int batch) {
  std::vector<std::unique_ptr<DeviceTensor>> xs, dys, batched, single;
  std::vector<void*> x_ptrs, dy_ptrs, dw_ptrs;
  for (int i = 0; i < batch; ++i) {
    xs.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kRows * kIn}, DType::bf16));
    dys.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kRows * kOut}, DType::bf16));
    batched.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kIn * kOut}, DType::f32));
    single.push_back(
        std::make_unique<DeviceTensor>(std::initializer_list<int64_t>{kIn * kOut}, DType::f32));
    fill_uniform(xs.back()->view, -1, 1, 90 + 2 * i);
    fill_uniform(dys.back()->view, -1, 1, 91 + 2 * i);
    x_ptrs.push_back(xs.back()->view.data);
    dy_ptrs.push_back(dys.back()->view.data);
    dw_ptrs.push_back(batched.back()->view.data);
  }
  DeviceTensor pointers({3 * static_cast<int64_t>(batch) * 2}, DType::f32);  // 3 arrays of 8-byte
  void** device_arrays = static_cast<void**>(pointers.view.data);
  CUDA_CHECK(cudaMemcpy(device_arrays, x_ptrs.data(), batch * sizeof(void*), cudaMemcpyDefault));
  CUDA_CHECK(
      cudaMemcpy(device_arrays + batch, dy_ptrs.data(), batch * sizeof(void*), cudaMemcpyDefault));
  CUDA_CHECK(cudaMemcpy(device_arrays + 2 * batch, dw_ptrs.data(), batch * sizeof(void*),
                        cudaMemcpyDefault));
  cublasLtHandle_t lt = cuda::lt_handle_for_current_device();
  cudaStream_t stream = cuda::current_stream();
  void* workspace = cuda::stream_resources(stream).blas_workspace();
  const BatchDescriptors one(1), many(batch);
  const cublasLtMatmulAlgo_t one_algo = one.heuristic(lt);
  const cublasLtMatmulAlgo_t many_algo = batch == 1 ? one_algo : many.heuristic(lt);
  auto one_at_a_time = [&](const std::vector<std::unique_ptr<DeviceTensor>>& out) {
    for (int i = 0; i < batch; ++i)
      run(lt, one, one_algo, x_ptrs[i], dy_ptrs[i], out[i]->view.data, workspace, stream);
  };
  auto as_batch = [&] {
    if (batch == 1)
      run(lt, one, one_algo, x_ptrs[0], dy_ptrs[0], dw_ptrs[0], workspace, stream);
    else
      run(lt, many, many_algo, device_arrays, device_arrays + batch, device_arrays + 2 * batch,
          workspace, stream);
  };
  // One accumulation from zero each way, then the gap between the results.
  as_batch();
  one_at_a_time(single);
  CUDA_CHECK(cudaDeviceSynchronize());
  double gap = 0;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> got(kIn * kOut), want(kIn * kOut);
    CUDA_CHECK(cudaMemcpy(got.data(), batched[i]->view.data, got.size() * 4, cudaMemcpyDefault));
    CUDA_CHECK(cudaMemcpy(want.data(), single[i]->view.data, want.size() * 4, cudaMemcpyDefault));
    gap = std::max(gap, max_scaled_gap(got, want));
  }
  const double separate_ms = timer.median_ms([&] { one_at_a_time(single); });
  const double batch_ms = timer.median_ms(as_batch);
  const double flop = 2.0 * kRows * kIn * kOut * batch;
  std::printf(
      "wgrad batch %d x %lldx%lldx%lld: one launch %.4f ms (%.4f a product, %.0f TFLOP/s), "
      "one launch each %.4f ms; largest difference %.1e of the largest value\n",
      batch, static_cast<long long>(kIn), static_cast<long long>(kOut),
      static_cast<long long>(kRows), batch_ms, batch_ms / batch, flop / (batch_ms * 1e-3) / 1e12,
      separate_ms, gap);
  if (batch == 3)
    std::printf("  a base step's %d decoder layers, three each: %.4f ms saved\n", kDecoderLayers,
                (separate_ms - batch_ms) * kDecoderLayers);
  std::fflush(stdout);
}

}  // namespace

void bench_wgrad_batch(KernelTimer& timer) {
  try {
    for (int batch : {1, 2, 3, 6}) bench_batch(timer, batch);
  } catch (const std::exception& e) {
    std::printf("wgrad-batch: %s\n", e.what());
  }
  std::fflush(stdout);
}

}  // namespace nmt::bench
