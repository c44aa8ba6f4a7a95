// Tensor: a non-owning view (pointer, dtype, device, shape) that every op takes. Memory is owned
// elsewhere (engine/model/arena.h); a view never allocates or frees.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace nmt {

enum class Device : uint8_t { cpu, cuda };
enum class DType : uint8_t { f32, bf16, f16, i32 };

inline size_t dtype_size(DType t) { return (t == DType::bf16 || t == DType::f16) ? 2 : 4; }
const char* dtype_name(DType t);
const char* device_name(Device d);

struct Tensor {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};

  Tensor() = default;
  Tensor(void* ptr, DType type, Device dev, std::initializer_list<int64_t> dims);

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape.at(i < 0 ? rank + i : i); }
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string shape_string() const;  // "[128, 512] f32 cpu"

  // Typed pointers; throw if the dtype does not match.
  float* f32() const;
  int32_t* i32() const;
  // The same memory seen with another shape of the same element count.
  Tensor reshaped(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of the first dimension.
  Tensor rows(int64_t begin, int64_t end) const;
};

}  // namespace nmt
