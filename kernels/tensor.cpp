// Tensor view helpers: shape checks and readable shape strings.
#include "kernels/tensor.h"

#include <sstream>

namespace nmt {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
  }
  return "?";
}

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Tensor::Tensor(void* ptr, DType type, Device dev, std::initializer_list<int64_t> dims)
    : data(ptr), dtype(type), device(dev), rank(static_cast<int>(dims.size())) {
  if (rank > kMaxRank) throw std::invalid_argument("Tensor: rank > 4");
  int i = 0;
  for (int64_t d : dims) shape[i++] = d;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

std::string Tensor::shape_string() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[i];
  os << "] " << dtype_name(dtype) << " " << device_name(device);
  return os.str();
}

float* Tensor::f32() const {
  if (dtype != DType::f32) throw std::invalid_argument("Tensor::f32() on a " + shape_string() + " tensor");
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  if (dtype != DType::i32) throw std::invalid_argument("Tensor::i32() on a " + shape_string() + " tensor");
  return static_cast<int32_t*>(data);
}

Tensor Tensor::reshaped(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  if (t.numel() != numel())
    throw std::invalid_argument("Tensor::reshaped: " + shape_string() + " to " + t.shape_string());
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (rank < 1 || begin < 0 || end > shape[0] || begin > end)
    throw std::invalid_argument("Tensor::rows out of range on " + shape_string());
  Tensor t = *this;
  int64_t row_elems = shape[0] ? numel() / shape[0] : 0;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_elems) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

}  // namespace nmt
