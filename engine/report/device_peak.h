// Peak dense FLOP/s of the GPUs we know, looked up by the name the CUDA runtime reports, for the
// precision the matrix products run in: the denominator of MFU.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kernels/tensor.h"

namespace nmt {

enum class MatmulPrecision {
  fp32,  // CUDA cores, no tensor cores
  tf32,  // tensor cores on fp32 data
  bf16,  // tensor cores on bf16 or fp16 data (the same peak)
};
const char* matmul_precision_name(MatmulPrecision precision);  // "fp32 (no tensor cores)", ...

// The precision of the products when training in `compute`. fp32 is plain fp32: the products in
// kernels/cuda/blas.cpp and kernels/cuda/attention.cu ask for CUBLAS_COMPUTE_32F, which never
// uses TF32 (that takes CUBLAS_COMPUTE_32F_FAST_TF32 or the TF32 math mode).
MatmulPrecision matmul_precision_for(DType compute);

// Dense (no sparsity) peak of the card named `device_name` (as cudaGetDeviceProperties reports it,
// e.g. "NVIDIA H100 80GB HBM3"), from NVIDIA's data sheets; nullopt for a card not in the table.
std::optional<double> peak_flops_per_s(std::string_view device_name, MatmulPrecision precision);

struct DevicePeak {
  std::string device_name;     // "" on the CPU
  std::string precision;       // matmul_precision_name(...)
  double flops_per_s = 0;      // 0 when unknown
  std::string unknown_reason;  // why flops_per_s is 0 ("CPU run", "no peak known for ...")
};

// The current CUDA device's name and peak for training in `compute` on `device`; on the CPU the
// peak is unknown (MFU is not defined there).
DevicePeak device_peak_for_training(Device device, DType compute);

}  // namespace nmt
