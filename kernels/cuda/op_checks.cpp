// Argument checks of the CUDA ops, and the cached multiprocessor count.
#include "kernels/cuda/op_checks.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/check.h"

namespace nmt::cuda {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

}  // namespace

void require_cuda(const char* op, const char* name, const Tensor& t) {
  if (!t.empty() && t.device != Device::cuda)
    fail(op, std::string(name) + " " + t.shape_string() + " must be on the GPU");
}

void require_data(const char* op, const char* name, const Tensor& t) {
  if (t.empty() && t.numel() != 0)
    fail(op, std::string(name) + " " + t.shape_string() + " has no data");
}

void require_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors) {
  for (const NamedTensor& t : tensors) {
    require_cuda(op, t.name, *t.tensor);
    require_data(op, t.name, *t.tensor);
  }
}

void require_optional_on_gpu(const char* op, std::initializer_list<NamedTensor> tensors) {
  for (const NamedTensor& t : tensors) require_cuda(op, t.name, *t.tensor);
}

void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (t.dtype != dtype)
    fail(op, std::string(name) + " must be " + dtype_name(dtype) + ", got " + t.shape_string());
}

void require_same_dtype(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like) {
  if (t.dtype != like.dtype)
    fail(op, std::string(name) + " " + t.shape_string() + " must have the dtype of " + like_name +
                 " " + like.shape_string());
}

void require_same_shape(const char* op, const char* name, const Tensor& t, const char* like_name,
                        const Tensor& like) {
  bool same = t.rank == like.rank;
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == like.shape[i];
  if (!same)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected the shape of " +
                 like_name + " " + like.shape_string());
}

void require_rank(const char* op, const char* name, const Tensor& t, int rank) {
  if (t.rank != rank)
    fail(op, std::string(name) + " has shape " + t.shape_string() + ", expected rank " +
                 std::to_string(rank));
}

int multiprocessor_count() {
  thread_local int cached[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= 64) device = 0;
  if (cached[device] == 0)
    CUDA_CHECK(cudaDeviceGetAttribute(&cached[device], cudaDevAttrMultiProcessorCount, device));
  return cached[device];
}

}  // namespace nmt::cuda
