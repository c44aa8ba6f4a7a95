// Argument checks of the CUDA ops (device, dtype, data present), with messages naming the op.
#pragma once

#include <initializer_list>

#include "kernels/tensor.h"

namespace nmt::cuda {

struct NamedTensor {
  const char* name;
  const Tensor* tensor;
};

// require_cuda and require_data for each tensor.
void require_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors);
// For optional arguments, which a Tensor without data (a default Tensor) leaves out: require_cuda.
void require_optional_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors);

// Throws std::invalid_argument unless `t` is empty or lives on the GPU.
void require_cuda(const char* op, const char* name, const Tensor& t);
// Throws unless `t` has data whenever it has elements.
void require_data(const char* op, const char* name, const Tensor& t);
void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype);
void require_same_dtype(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like);
void require_same_shape(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like);
void require_rank(const char* op, const char* name, const Tensor& t, int rank);

// Multiprocessors of the current device (cached per device and thread).
int multiprocessor_count();

}  // namespace nmt::cuda
