// linear_weight_grads on the GPU: the products' dW += dyᵀ x as one cuBLASLt launch over a
// pointer-array batch (CUBLASLT_BATCH_MODE_POINTER_ARRAY), the three arrays written into the
// stream's scratch by write_batch_pointers, so a captured graph replays the same arrays
// (docs/cuda.md, Linear). Where a pointer is off the 16-byte alignment the plans assume, the batch
// has one product, or cuBLASLt lists no batched algorithm, each runs as linear_backward's dW
// product.
#include <cublasLt.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/cuda/batch_pointers.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_plan.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/stream.h"

namespace nmt::cuda {
namespace {

// One batched plan: the dW product's descriptors in pointer-array mode over `batch` products, and
// the heuristic's algorithm for 16-byte aligned pointers (found false: cuBLASLt has none for this
// shape, dtype and count, and the products run one launch each).
struct BatchPlan {
  bool found = false;
  LtMatmul g;
  std::unique_ptr<LtDescriptors> d;
  cublasLtMatmulAlgo_t algo{};
};

// Looked up once per key, outside a capture (the step before one runs the same batches).
const BatchPlan& batch_plan(int64_t rows, int64_t in, int64_t out, DType t, int batch) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, DType, int>;
  thread_local std::map<Key, std::unique_ptr<BatchPlan>> plans;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const Key key{device, rows, in, out, t, batch};
  auto found = plans.find(key);
  if (found != plans.end()) return *found->second;
  auto plan = std::make_unique<BatchPlan>();
  plan->g = linear_dw_product(rows, in, out, t);
  plan->d = std::make_unique<LtDescriptors>(plan->g, LtEpilogue::none);
  const uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
  for (cublasLtMatrixLayout_t layout : {plan->d->a, plan->d->b, plan->d->c}) {
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &batch, sizeof(batch)));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode,
                                                  sizeof(mode)));
  }
  std::vector<cublasLtMatmulHeuristicResult_t> results;
  const cublasStatus_t status = lt_heuristic(lt_handle_for_current_device(), *plan->d,
                                             LtAlignments{}, kBlasWorkspaceBytes, 1, results);
  plan->found = status == CUBLAS_STATUS_SUCCESS && !results.empty();
  if (plan->found) plan->algo = results[0].algo;
  return *plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

void linear_weight_grads(const std::vector<WeightGradProduct>& products) {
  if (products.empty()) return;
  const int64_t rows = products[0].x.dim(0), in = products[0].x.dim(1), out = products[0].dy.dim(1);
  if (rows == 0 || in == 0 || out == 0) return;
  const DType t = products[0].x.dtype;
  cudaStream_t stream = current_stream();
  const int count = static_cast<int>(products.size());
  bool aligned = true;
  for (const WeightGradProduct& p : products)
    aligned = aligned && lt_alignment_of(p.x.data) == 16 && lt_alignment_of(p.dy.data) == 16 &&
              lt_alignment_of(p.dw.data) == 16;
  const BatchPlan* plan = count > 1 && aligned ? &batch_plan(rows, in, out, t, count) : nullptr;
  if (plan == nullptr || !plan->found) {
    for (const WeightGradProduct& p : products)
      lt_matmul(linear_dw_product(rows, in, out, t), p.x.data, p.dy.data, p.dw.data, nullptr, 1.0f,
                stream);
    return;
  }
  StreamResources& resources = stream_resources(stream);
  auto** arrays = static_cast<void**>(resources.scratch(3 * count * sizeof(void*)));
  BatchPointers pointers{};
  for (int i = 0; i < count; ++i) {
    pointers.x[i] = products[i].x.data;
    pointers.dy[i] = products[i].dy.data;
    pointers.dw[i] = products[i].dw.data;
  }
  write_batch_pointers(pointers, count, arrays, stream);
  CUBLAS_CHECK(lt_run(lt_handle_for_current_device(), *plan->d, plan->algo, plan->g, arrays,
                      arrays + count, arrays + 2 * count, nullptr, 1.0f, resources.blas_workspace(),
                      kBlasWorkspaceBytes, stream));
}

}  // namespace nmt::cuda
