// Helpers of the CUDA test suites: device buffers, uploads and downloads in any dtype, rounding to
// a dtype, and the comparison of a GPU result against the CPU fp32 reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace nmt::test {

// Device memory owned by a test, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A GPU tensor with its own memory. `offset_elements` > 0 shifts the view off 16-byte alignment
// (to exercise the unaligned paths).
struct GpuTensor {
  DeviceBuffer buffer;
  Tensor view;
};

Tensor make_view(void* data, DType dtype, Device device, const std::vector<int64_t>& shape);
int64_t count_of(const std::vector<int64_t>& shape);

// Elements filled with 0xFF bytes (NaN in every float dtype), so an unwritten output shows.
GpuTensor gpu_poisoned(const std::vector<int64_t>& shape, DType dtype, int offset_elements = 0);

// What dropout_residual_layernorm_forward writes, poisoned: sum and y [rows, d] (shifted by
// `offset` elements), mean and rstd [rows] f32.
struct ForwardOutputs {
  GpuTensor sum, y, mean, rstd;
  ForwardOutputs(int64_t rows, int64_t d, DType dtype, int offset)
      : sum(gpu_poisoned({rows, d}, dtype, offset)),
        y(gpu_poisoned({rows, d}, dtype, offset)),
        mean(gpu_poisoned({rows}, DType::f32)),
        rstd(gpu_poisoned({rows}, DType::f32)) {}
};
GpuTensor upload(const std::vector<float>& values, const std::vector<int64_t>& shape, DType dtype,
                 int offset_elements = 0);
GpuTensor upload_i32(const std::vector<int32_t>& values, const std::vector<int64_t>& shape);
// Synchronises the device and returns the elements as float.
std::vector<float> download(const Tensor& t);
// Synchronises the device and returns an i32 tensor's elements (masks saved as bit words).
std::vector<int32_t> download_i32(const Tensor& t);

Tensor cpu_view(std::vector<float>& values, const std::vector<int64_t>& shape);
Tensor cpu_view_i32(std::vector<int32_t>& values, const std::vector<int64_t>& shape);

std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Values of magnitude 0.25 to 2 with random signs: a dropped element (0) is told apart from a
// kept one.
std::vector<float> nonzero_values(size_t n, uint64_t seed);
float round_to(float value, DType dtype);
std::vector<float> rounded(std::vector<float> values, DType dtype);

// Checks (Catch2 CHECKs) that `gpu` is close to the fp32 reference `ref`. For f32 the error must
// be within `f32_floor` of the reference's size. For bf16 / f16 it must be at most `factor` times
// the error of `baseline` (the CPU reference run on inputs rounded to that dtype) plus a small
// floor, in L2 norm, and (factor + 1) times in max norm. NaN never passes.
void check_close(const std::string& what, DType dtype, const std::vector<float>& gpu,
                 const std::vector<float>& ref, const std::vector<float>& baseline,
                 double factor = 2.0, double f32_floor = 1e-5);

// Checks that two vectors are equal bit for bit (NaN included).
void check_identical(const std::string& what, const std::vector<float>& a,
                     const std::vector<float>& b);

}  // namespace nmt::test
