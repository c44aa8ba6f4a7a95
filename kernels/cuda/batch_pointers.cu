// write_batch_pointers (batch_pointers.h).
#include "kernels/cuda/batch_pointers.h"
#include "kernels/cuda/check.h"

namespace nmt::cuda {
namespace {

static_assert(kMaxWeightGradBatch <= 32, "write_batch_pointers_kernel writes with one warp");

__global__ void write_batch_pointers_kernel(BatchPointers p, int count, void** arrays) {
  const int i = threadIdx.x;
  if (i >= count) return;
  arrays[i] = const_cast<void*>(p.x[i]);
  arrays[count + i] = const_cast<void*>(p.dy[i]);
  arrays[2 * count + i] = p.dw[i];
}

}  // namespace

void write_batch_pointers(const BatchPointers& pointers, int count, void** arrays,
                          cudaStream_t stream) {
  write_batch_pointers_kernel<<<1, 32, 0, stream>>>(pointers, count, arrays);
  CUDA_CHECK_LAUNCH();
}

}  // namespace nmt::cuda
