// Helpers of the CUDA test suites: device buffers, dtype conversion and error comparison.
#include "test/cuda/gpu_test_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <utility>

#include "kernels/cuda/check.h"
#include "test/support/catch.h"

namespace nmt::test {

DeviceBuffer::DeviceBuffer(size_t bytes) {
  CUDA_CHECK(cudaMalloc(&data_, bytes ? bytes : 1));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

Tensor make_view(void* data, DType dtype, Device device, const std::vector<int64_t>& shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  return t;
}

int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::vector<char> encode(const std::vector<float>& values, DType dtype) {
  std::vector<char> bytes(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    char* at = bytes.data() + i * dtype_size(dtype);
    if (dtype == DType::f32) {
      std::memcpy(at, &values[i], 4);
    } else if (dtype == DType::bf16) {
      __nv_bfloat16 h = __float2bfloat16_rn(values[i]);
      std::memcpy(at, &h, 2);
    } else {
      __half h = __float2half_rn(values[i]);
      std::memcpy(at, &h, 2);
    }
  }
  return bytes;
}

GpuTensor allocate(const std::vector<int64_t>& shape, DType dtype, int offset_elements) {
  const size_t es = dtype_size(dtype);
  GpuTensor t;
  t.buffer = DeviceBuffer((static_cast<size_t>(count_of(shape)) + offset_elements) * es);
  t.view = make_view(static_cast<char*>(t.buffer.data()) + offset_elements * es, dtype,
                     Device::cuda, shape);
  return t;
}

}  // namespace

GpuTensor gpu_poisoned(const std::vector<int64_t>& shape, DType dtype, int offset_elements) {
  GpuTensor t = allocate(shape, dtype, offset_elements);
  CUDA_CHECK(cudaMemset(t.view.data, 0xFF, t.view.bytes()));
  return t;
}

GpuTensor upload(const std::vector<float>& values, const std::vector<int64_t>& shape, DType dtype,
                 int offset_elements) {
  REQUIRE(static_cast<int64_t>(values.size()) == count_of(shape));
  GpuTensor t = allocate(shape, dtype, offset_elements);
  const std::vector<char> bytes = encode(values, dtype);
  CUDA_CHECK(cudaMemcpy(t.view.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return t;
}

GpuTensor upload_i32(const std::vector<int32_t>& values, const std::vector<int64_t>& shape) {
  REQUIRE(static_cast<int64_t>(values.size()) == count_of(shape));
  GpuTensor t = allocate(shape, DType::i32, 0);
  CUDA_CHECK(cudaMemcpy(t.view.data, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  return t;
}

std::vector<int32_t> download_i32(const Tensor& t) {
  REQUIRE(t.dtype == DType::i32);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> values(static_cast<size_t>(t.numel()));
  if (!values.empty())
    CUDA_CHECK(cudaMemcpy(values.data(), t.data, values.size() * 4, cudaMemcpyDeviceToHost));
  return values;
}

std::vector<float> download(const Tensor& t) {
  CUDA_CHECK(cudaDeviceSynchronize());
  const size_t n = static_cast<size_t>(t.numel()), es = dtype_size(t.dtype);
  std::vector<char> bytes(n * es);
  if (n) CUDA_CHECK(cudaMemcpy(bytes.data(), t.data, n * es, cudaMemcpyDeviceToHost));
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    const char* at = bytes.data() + i * es;
    if (t.dtype == DType::f32) {
      std::memcpy(&values[i], at, 4);
    } else if (t.dtype == DType::bf16) {
      __nv_bfloat16 h;
      std::memcpy(&h, at, 2);
      values[i] = __bfloat162float(h);
    } else if (t.dtype == DType::f16) {
      __half h;
      std::memcpy(&h, at, 2);
      values[i] = __half2float(h);
    } else {
      int32_t v;
      std::memcpy(&v, at, 4);
      values[i] = static_cast<float>(v);
    }
  }
  return values;
}

Tensor cpu_view(std::vector<float>& values, const std::vector<int64_t>& shape) {
  REQUIRE(static_cast<int64_t>(values.size()) == count_of(shape));
  return make_view(values.data(), DType::f32, Device::cpu, shape);
}

Tensor cpu_view_i32(std::vector<int32_t>& values, const std::vector<int64_t>& shape) {
  REQUIRE(static_cast<int64_t>(values.size()) == count_of(shape));
  return make_view(values.data(), DType::i32, Device::cpu, shape);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  return values;
}

std::vector<float> nonzero_values(size_t n, uint64_t seed) {
  std::vector<float> v = random_floats(n, seed, 0.25f, 2.0f);
  const std::vector<float> sign = random_floats(n, seed + 1);
  for (size_t i = 0; i < n; ++i)
    if (sign[i] < 0) v[i] = -v[i];
  return v;
}

float round_to(float value, DType dtype) {
  if (dtype == DType::bf16) return __bfloat162float(__float2bfloat16_rn(value));
  if (dtype == DType::f16) return __half2float(__float2half_rn(value));
  return value;
}

std::vector<float> rounded(std::vector<float> values, DType dtype) {
  for (float& v : values) v = round_to(v, dtype);
  return values;
}

namespace {

struct Norms {
  double max_abs = 0, l2 = 0;
  bool finite = true;
};

Norms difference(const std::vector<float>& a, const std::vector<float>& b) {
  Norms n;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    if (!std::isfinite(d)) n.finite = false;
    n.max_abs = std::max(n.max_abs, std::fabs(d));
    n.l2 += d * d;
  }
  n.l2 = std::sqrt(n.l2);
  return n;
}

}  // namespace

void check_close(const std::string& what, DType dtype, const std::vector<float>& gpu,
                 const std::vector<float>& ref, const std::vector<float>& baseline, double factor,
                 double f32_floor) {
  REQUIRE(gpu.size() == ref.size());
  REQUIRE(baseline.size() == ref.size());
  const std::vector<float> zeros(ref.size(), 0.0f);
  const Norms err = difference(gpu, ref), base = difference(baseline, ref),
              size = difference(ref, zeros);
  const bool low_precision = dtype != DType::f32;
  const double floor = low_precision ? 1e-4 : f32_floor;
  const double l2_bound = (low_precision ? factor * base.l2 : 0.0) + floor * size.l2 + 1e-30;
  const double max_bound =
      (low_precision ? (factor + 1.0) * base.max_abs : 0.0) + floor * size.max_abs + 1e-30;
  std::ostringstream info;
  info << what << " [" << dtype_name(dtype) << ", " << ref.size() << " elements]: gpu error L2 "
       << err.l2 << " max " << err.max_abs << "; baseline error L2 " << base.l2 << " max "
       << base.max_abs << "; reference L2 " << size.l2 << " max " << size.max_abs;
  INFO(info.str());
  CHECK(err.finite);
  CHECK(err.l2 <= l2_bound);
  CHECK(err.max_abs <= max_bound);
}

void check_identical(const std::string& what, const std::vector<float>& a,
                     const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  size_t mismatches = 0, first = a.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      if (!mismatches) first = i;
      ++mismatches;
    }
  INFO(what << ": " << mismatches << " of " << a.size() << " elements differ, first at " << first
            << (first < a.size()
                    ? " (" + std::to_string(a[first]) + " vs " + std::to_string(b[first]) + ")"
                    : std::string()));
  CHECK(mismatches == 0);
}

}  // namespace nmt::test
