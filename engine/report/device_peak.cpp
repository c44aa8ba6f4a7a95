// The peak table and the current CUDA device's name.
#include "engine/report/device_peak.h"

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"

namespace nmt {

namespace {

struct CardPeaks {
  std::string_view name_part;  // matched against the device name, first match wins
  double fp32, tf32, bf16;     // dense FLOP/s
};

// NVIDIA data sheets (dense: the tensor-core numbers there are halved when quoted with sparsity).
// More specific names come first: "H100 PCIe" before "H100", "GH200" before "H200".
constexpr CardPeaks kCards[] = {
    {"H100 PCIe", 51.2e12, 378.0e12, 756.5e12}, {"H100 NVL", 60.0e12, 417.5e12, 835.5e12},
    {"H100", 66.9e12, 494.7e12, 989.4e12},  // SXM5: "NVIDIA H100 80GB HBM3"
    {"GH200", 66.9e12, 494.7e12, 989.4e12},     {"H200 NVL", 60.0e12, 417.5e12, 835.5e12},
    {"H200", 66.9e12, 494.7e12, 989.4e12},  // SXM: the H100 SXM's compute, more memory
    {"A100", 19.5e12, 156.0e12, 312.0e12},
};

}  // namespace

const char* matmul_precision_name(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::fp32:
      return "fp32 (no tensor cores)";
    case MatmulPrecision::tf32:
      return "tf32 tensor cores";
    case MatmulPrecision::bf16:
      return "bf16/fp16 tensor cores";
  }
  return "?";
}

MatmulPrecision matmul_precision_for(DType compute) {
  return compute == DType::bf16 || compute == DType::f16 ? MatmulPrecision::bf16
                                                         : MatmulPrecision::fp32;
}

std::optional<double> peak_flops_per_s(std::string_view device_name, MatmulPrecision precision) {
  for (const CardPeaks& card : kCards) {
    if (device_name.find(card.name_part) == std::string_view::npos) continue;
    switch (precision) {
      case MatmulPrecision::fp32:
        return card.fp32;
      case MatmulPrecision::tf32:
        return card.tf32;
      case MatmulPrecision::bf16:
        return card.bf16;
    }
  }
  return std::nullopt;
}

DevicePeak device_peak_for_training(Device device, DType compute) {
  DevicePeak peak;
  MatmulPrecision precision = matmul_precision_for(compute);
  peak.precision = matmul_precision_name(precision);
  if (device != Device::cuda) {
    peak.unknown_reason = "CPU run";
    return peak;
  }
  int index = 0;
  CUDA_CHECK(cudaGetDevice(&index));
  cudaDeviceProp properties{};
  CUDA_CHECK(cudaGetDeviceProperties(&properties, index));
  peak.device_name = properties.name;
  if (std::optional<double> flops = peak_flops_per_s(peak.device_name, precision))
    peak.flops_per_s = *flops;
  else
    peak.unknown_reason =
        "no peak FLOP/s known for \"" + peak.device_name + "\" (engine/report/device_peak.cpp)";
  return peak;
}

}  // namespace nmt
