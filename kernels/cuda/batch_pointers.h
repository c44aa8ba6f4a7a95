// The device-side pointer arrays of a cuBLASLt pointer-array batch (linear_weight_grads.cpp),
// written by a one-warp kernel whose arguments hold the pointers: a captured graph replays the same
// arrays without a host copy.
#pragma once

#include <cuda_runtime.h>

#include "kernels/linear.h"

namespace nmt::cuda {

// The pointers of one batch: x, dy and dw of each product.
struct BatchPointers {
  const void* x[kMaxWeightGradBatch];
  const void* dy[kMaxWeightGradBatch];
  void* dw[kMaxWeightGradBatch];
};

// Enqueues on `stream` the writes of arrays [3][count] (device memory): the x pointers, then the
// dy pointers, then the dw pointers. count <= kMaxWeightGradBatch.
void write_batch_pointers(const BatchPointers& pointers, int count, void** arrays,
                          cudaStream_t stream);

}  // namespace nmt::cuda
